"""``dlsched simulate`` end to end, as a user runs it: saved DAG + oracle CSV."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from dlsched.analyses.simulate import simulate
from dlsched.formats.dag_json import load_dag, save_dag
from dlsched.formats.oracle_file import write_oracle
from dlsched.profiling.oracle_times import load_times
from dlsched.formats.priority_file import make_priority_file, write_priority_file
from dlsched.synthetic import random_dag
from tests.conftest import assert_clean_error, run_cli


def _save(tmp, name, graph, times):
    dag = tmp / f"{name}.dag.json"
    oracle = tmp / f"{name}.csv"
    save_dag(graph, dag)
    write_oracle(pd.DataFrame({"op": list(times), "time": list(times.values())}), oracle)
    return dag, oracle


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    """A 2-server training graph (DAG file + oracle) and a different model."""
    tmp = tmp_path_factory.mktemp("simcli")
    g, t = random_dag(60, 14, training=True, ps=2, seed=21)
    dag, oracle = _save(tmp, "net", g, t)
    other, other_t = random_dag(30, 6, training=True, ps=1, seed=5)
    other_dag, other_oracle = _save(tmp, "other", other, other_t)
    tiny, tiny_t = random_dag(10, 5, training=True, ps=1, seed=8)
    tiny_dag, tiny_oracle = _save(tmp, "tiny", tiny, tiny_t)
    # the times as the CLI reads them back (the CSV keeps 9 significant digits)
    return {"dir": tmp, "dag": dag, "oracle": oracle, "times": load_times(oracle, g), "other": other, "other_dag": other_dag,
            "tiny_dag": tiny_dag, "tiny_oracle": tiny_oracle}


def _json(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_single_worker_json(model):
    out = _json(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--json"))
    for key in ("makespan", "efficiency", "upper", "lower", "speedup", "algorithm", "workers", "iterations"):
        assert key in out
    assert out["lower"] <= out["makespan"] <= out["upper"]
    assert 0 <= out["efficiency"] <= 1
    assert out["algorithm"] == "unordered"
    g = load_dag(model["dag"])
    assert out["makespan"] == pytest.approx(simulate(g, model["times"], None, seed=0).makespan, rel=1e-12)
    assert out["efficiency"] == pytest.approx((out["upper"] - out["makespan"]) / (out["upper"] - out["lower"]))


def test_priority_file_is_enforced(model):
    g = load_dag(model["dag"])
    prio = {r.name: i for i, r in enumerate(reversed(g.recvs()))}
    path = model["dir"] / "reversed.json"
    write_priority_file(make_priority_file(g, prio, "reversed"), path)
    out = _json(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--priorities", path, "--json"))
    assert out["makespan"] == pytest.approx(simulate(g, model["times"], prio).makespan, rel=1e-12)
    assert out["algorithm"].startswith("reversed")


def test_multi_worker_json_and_table(model):
    args = ("simulate", model["dag"], "--oracle", model["oracle"], "--workers", "3", "--iterations", "6",
            "--jitter", "0.1", "--seed", "4")
    out = _json(run_cli(*args, "--json"))
    assert out["workers"] == 3 and out["iterations"] == 6
    for key in ("iteration_time", "straggler_share"):
        assert set(out[key]) >= {"mean", "p50", "p95"}
    assert out["makespan"] == pytest.approx(out["iteration_time"]["mean"])
    assert 0 <= out["straggler_share"]["mean"] < 1
    assert len(out["per_iteration"]) == 6 and all(len(r["makespans"]) == 3 for r in out["per_iteration"])
    for r in out["per_iteration"]:
        assert r["iteration_time"] == pytest.approx(max(r["makespans"]))
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert "straggler share" in proc.stdout and "per worker" in proc.stdout


def test_compare_orders(model):
    out = _json(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--compare", "tic,tac,random,topo",
                        "--json"))
    rows = {r["algorithm"]: r for r in out["compare"]}
    assert list(rows) == ["tic", "tac", "random", "topo"]
    for r in rows.values():
        assert out["lower"] - 1e-12 <= r["makespan"] <= out["upper"] + 1e-12
        assert set(r) == {"algorithm", "makespan", "efficiency", "straggler_share"}
    proc = run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--compare", "tac,random",
                   "--workers", "2", "--iterations", "3")
    assert proc.returncode == 0, proc.stderr
    assert "orders compared" in proc.stdout


def test_trace_and_plot(model):
    trace = model["dir"] / "out" / "trace.json"
    png = model["dir"] / "out" / "gantt.png"
    out = _json(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--algo", "tac",
                        "--trace-out", trace, "--plot", png, "--json"))
    doc = json.loads(trace.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == out["ops"]
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(out["makespan"] * 1e6, rel=1e-6)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {"compute:0", "ps:0/down", "ps:1/down", "ps:0/up", "ps:1/up"} <= names
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # several workers: one process per worker plus the shared links
    trace2 = model["dir"] / "out" / "trace2.json"
    _json(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--workers", "2", "--trace-out", trace2,
                  "--json"))
    doc2 = json.loads(trace2.read_text())
    assert len({e["pid"] for e in doc2["traceEvents"] if e["ph"] == "X"}) == 3


def test_exact_on_a_small_model_and_refusal_on_a_large_one(model):
    out = _json(run_cli("simulate", model["tiny_dag"], "--oracle", model["tiny_oracle"], "--algo", "exact",
                        "--compare", "tac,exact", "--json"))
    rows = {r["algorithm"]: r["makespan"] for r in out["compare"]}
    assert out["makespan"] == pytest.approx(rows["exact"]) and rows["exact"] <= rows["tac"] + 1e-12
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--algo", "exact"),
                       "time limit")


def test_bad_inputs_exit_2(model):
    g = load_dag(model["dag"])
    # a priority file made for another model
    other = model["dir"] / "other-prio.json"
    write_priority_file(make_priority_file(model["other"], {r.name: i for i, r in
                                                            enumerate(model["other"].recvs())}, "tac"), other)
    png = model["dir"] / "never.png"
    proc = run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--priorities", other, "--plot", png)
    assert_clean_error(proc, "fingerprint")
    assert not png.exists()
    # a file with the right fingerprint naming transfers the model lacks
    bogus = make_priority_file(g, {g.recvs()[0].name: 0}, "tac")
    bogus.transfers[0].name = "no.such.parameter"
    path = model["dir"] / "bogus.json"
    write_priority_file(bogus, path)
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--priorities", path),
                       "no.such.parameter")
    tictac = model["dir"] / "bogus.tsv"
    tictac.write_text("p0\t0\nghost_param\t1\n")
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--priorities", tictac),
                       "ghost_param")
    # both an order file and an algorithm
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--priorities", path,
                               "--algo", "tac"), "not both")
    # an oracle missing ops, then fixed by --default-time
    partial = model["dir"] / "partial.csv"
    pd.DataFrame({"op": ["p0"], "time": [0.001]}).to_csv(partial, index=False)
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", partial), "--default-time")
    assert _json(run_cli("simulate", model["dag"], "--oracle", partial, "--default-time", "1ms",
                         "--json"))["makespan"] > 0
    assert_clean_error(run_cli("simulate", model["dag"], "--oracle", model["oracle"], "--compare", "tac,magic"),
                       "magic")
