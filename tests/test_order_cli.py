"""``dlsched bounds`` and ``dlsched order`` through the CLI, as a user runs them."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from dlsched.formats.dag_json import load_dag, save_dag
from dlsched.formats.oracle_file import write_oracle
from dlsched.formats.priority_file import read_priority_file
from dlsched.synthetic import random_dag
from tests.conftest import assert_clean_error, run_cli


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A saved synthetic training DAG, a full oracle and one missing three ops."""
    d = tmp_path_factory.mktemp("order_cli")
    g, t = random_dag(60, 12, training=True, ps=2, seed=3)
    save_dag(g, d / "m.dag.json")
    frame = pd.DataFrame({"op": list(t), "time": list(t.values())})
    write_oracle(frame, d / "oracle.csv")
    dropped = ["f5", "f7/bwd", "p3/grad"]
    write_oracle(frame[~frame["op"].isin(dropped)], d / "partial.csv")
    return {"dir": d, "dag": d / "m.dag.json", "oracle": d / "oracle.csv", "partial": d / "partial.csv",
            "dropped": dropped, "graph": g, "times": t}


def json_out(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_bounds_json(model, tmp_path):
    out = json_out(run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--json"))
    assert {"upper", "lower", "speedup", "loads"} <= set(out) and "efficiency" not in out
    assert set(out["loads"]) == {"compute:0", "ps:0/down", "ps:1/down", "ps:0/up", "ps:1/up"}
    assert out["upper"] == pytest.approx(sum(model["times"].values()))
    assert out["lower"] == pytest.approx(max(out["loads"].values()))
    assert out["speedup"] == pytest.approx((out["upper"] - out["lower"]) / out["lower"])
    m = (out["upper"] + out["lower"]) / 2
    rated = json_out(run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--makespan", str(m), "--json"))
    assert rated["makespan"] == pytest.approx(m) and rated["efficiency"] == pytest.approx(0.5)
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "ts": 0, "dur": m * 1e6}]}))
    traced = json_out(run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--trace", trace, "--json"))
    assert traced["efficiency"] == pytest.approx(0.5)
    table = run_cli("bounds", model["dag"], "--oracle", model["oracle"], "--makespan", "1ms")
    assert table.returncode == 0 and "upper bound" in table.stdout and "ps:1/down" in table.stdout


def test_bounds_refuses_partial_oracle(model):
    proc = run_cli("bounds", model["dag"], "--oracle", model["partial"])
    assert_clean_error(proc, "partial.csv", *model["dropped"], "--default-time")
    ok = json_out(run_cli("bounds", model["dag"], "--oracle", model["partial"], "--default-time", "1ms", "--json"))
    assert ok["upper"] > 0


@pytest.mark.parametrize("algo", ["tic", "tac", "random", "topo"])
def test_order_writes_priority_files(model, algo):
    graph = load_dag(model["dag"])
    out_json = model["dir"] / f"{algo}.json"
    out = json_out(run_cli("order", model["dag"], "--algo", algo, "--oracle", model["oracle"], "-o", out_json,
                           "--json"))
    assert out["algorithm"] == algo and out["transfers"] == 12 and out["output"] == str(out_json)
    assert out["lower"] <= out["makespan"] <= out["upper"] and out["efficiency"] <= 1 + 1e-9
    assert "unordered_makespan" in out
    pf = read_priority_file(out_json, graph)  # checks format, version and fingerprint
    assert pf.algorithm == algo and pf.oracle and len(pf.transfers) == 12
    doc = json.loads(out_json.read_text())
    assert doc["format"] == "dlsched.priorities" and doc["model"]["fingerprint"] == graph.fingerprint()
    prios = [t["priority"] for t in doc["transfers"]]
    assert prios == sorted(prios)
    out_tsv = model["dir"] / f"{algo}.tsv"
    json_out(run_cli("order", model["dag"], "--algo", algo, "--oracle", model["oracle"], "-o", out_tsv,
                     "--format", "tictac", "--json"))
    lines = [line.split("\t") for line in out_tsv.read_text().splitlines()]
    assert {(name, int(p)) for name, p in lines} == {(t.name, t.priority) for t in pf.transfers}


def test_order_tac_matches_library(model):
    from dlsched.analyses.tac import tac_order

    out = model["dir"] / "lib.json"
    json_out(run_cli("order", model["dag"], "--algo", "tac", "--oracle", model["oracle"], "-o", out, "--json"))
    graph = load_dag(model["dag"])
    from dlsched.profiling.oracle_times import load_times

    assert read_priority_file(out, graph).priorities == tac_order(graph, load_times(model["oracle"], graph))


def test_order_tic_without_oracle_and_table(model):
    out = model["dir"] / "tic_plain.json"
    doc = json_out(run_cli("order", model["dag"], "--algo", "tic", "-o", out, "--json"))
    assert doc["makespan"] is None and doc["oracle"] is None
    assert json.loads(out.read_text())["oracle"] is None
    table = run_cli("order", model["dag"], "--algo", "tac", "--oracle", model["oracle"], "-o", out)
    assert table.returncode == 0 and "priority" in table.stdout and "unordered" in table.stdout


def test_order_errors(model):
    out = model["dir"] / "never.json"
    assert_clean_error(run_cli("order", model["dag"], "--algo", "tac", "-o", out), "--algo tac", "--oracle")
    assert_clean_error(run_cli("order", model["dag"], "--algo", "exact", "-o", out), "--oracle")
    assert_clean_error(run_cli("order", model["dag"], "--algo", "tac", "--oracle", model["partial"], "-o", out),
                       *model["dropped"])
    assert not out.exists()  # nothing written on failure


def test_order_exact_small_and_refused_large(tmp_path):
    g, t = random_dag(10, 4, seed=3, integer_times=True)
    save_dag(g, tmp_path / "s.dag.json")
    write_oracle(pd.DataFrame({"op": list(t), "time": list(t.values())}), tmp_path / "s.csv")
    out = json_out(run_cli("order", tmp_path / "s.dag.json", "--algo", "exact", "--oracle", tmp_path / "s.csv",
                           "-o", tmp_path / "e.json", "--json"))
    assert out["transfers"] == 4 and out["makespan"] <= out["unordered_makespan"] + 1e-12
    big, bt = random_dag(150, 60, seed=1)
    save_dag(big, tmp_path / "b.dag.json")
    write_oracle(pd.DataFrame({"op": list(bt), "time": list(bt.values())}), tmp_path / "b.csv")
    proc = run_cli("order", tmp_path / "b.dag.json", "--algo", "exact", "--oracle", tmp_path / "b.csv",
                   "-o", tmp_path / "b.json")
    assert_clean_error(proc, "--time-limit")
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("hard", [False, True], ids=["proven", "time-limited"])
def test_exact_says_whether_the_optimum_was_proven(tmp_path, hard):
    """`order --algo exact --time-limit T` says whether the search finished (the optimum) or stopped early."""
    graph, times = (random_dag(60, 30, training=True, seed=4) if hard else random_dag(10, 4, training=True, seed=5))
    dag, orc = tmp_path / "m.dag.json", tmp_path / "o.csv"
    save_dag(graph, dag)
    write_oracle(pd.DataFrame({"op": list(times), "time": list(times.values())}), orc)
    args = ("order", dag, "--oracle", orc, "--algo", "exact", "--time-limit", "0.3", "-o", tmp_path / "p.json")
    x = json.loads(run_cli(*args, "--json").stdout)["exact"]
    assert x["proven"] is (not hard) and x["lower_bound"] <= x["makespan"] + 1e-12
    text = run_cli(*args).stdout
    assert ("not proven" in text and "proven lower bound" in text) if hard else "optimum proven" in text
