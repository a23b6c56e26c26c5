"""``dlsched profile`` through the CLI, and analyses' refusal of bad or partial oracles."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from dlsched.errors import OracleError
from dlsched.profiling.oracle_times import load_times, oracle_times
from dlsched.profiling.oracle import assemble_oracle
from dlsched.synthetic import random_dag
from tests.conftest import REPO, assert_clean_error, run_cli

SMALL_CNN = "examples/torch_models.py:small_cnn"
ORACLE_CMD = "bounds"  # an analysis that reads oracles


@pytest.fixture(scope="module")
def cnn_oracle(tmp_path_factory):
    """small_cnn profiled for real on the CPU (5 runs), with a 1 Gbps / 1 ms network model."""
    out = tmp_path_factory.mktemp("prof") / "oracle.csv"
    proc = run_cli("profile", SMALL_CNN, "--batch", "4", "-o", out, "--bandwidth", "1Gbps", "--latency", "1ms",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    from dlsched.formats.dag_json import save_dag

    d = tmp_path_factory.mktemp("syn")
    g, times = random_dag(12, 4, training=True, seed=5)
    save_dag(g, d / "m.dag.json")
    pd.DataFrame({"op": list(times), "time": list(times.values())}).to_csv(d / "good.csv", index=False)
    return g, times, d


@pytest.mark.slow
def test_profile_torch_small_cnn(cnn_oracle):
    from dlsched.importers.loader import load_model

    out, info = cnn_oracle
    g = load_model(SMALL_CNN, batch=4)
    df = pd.read_csv(out)
    assert set(df["op"]) == {op.name for op in g.ops()}
    comp = df[df["op"].isin([op.name for op in g.compute_ops()])]
    assert len(comp) == len(g.compute_ops()) == info["timed"] and info["untimed"] == {}
    assert (comp["source"] == "profiled").all() and (comp["runs"] == 5).all()
    assert (comp["time"] > 0).all() and (comp["time"] <= comp["median"]).all()
    assert info["total_compute_time"] == pytest.approx(comp["time"].sum())
    xfer = df[df["source"] == "network-model"].set_index("op")
    assert len(xfer) == len(g.recvs())
    for op in g.recvs():
        assert xfer.loc[op.name, "time"] == pytest.approx(1e-3 + op.bytes / 125e6, rel=1e-6)
        assert xfer.loc[op.name, "resource"] == op.resource
    assert info["bandwidth"] == pytest.approx(125e6) and info["latency"] == pytest.approx(1e-3)


@pytest.mark.slow
def test_profiled_oracle_feeds_analyses(cnn_oracle):
    out, _ = cnn_oracle
    proc = run_cli(ORACLE_CMD, SMALL_CNN, "--batch", "4", "--oracle", out, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)


def test_profile_human_report_and_parquet(tmp_path, synthetic):
    g, times, d = synthetic
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps([{"ph": "X", "name": n, "ts": i, "dur": 2.0, "pid": 0, "tid": 0}
                                 for i, n in enumerate(op.name for op in g.compute_ops())]))
    out = tmp_path / "o.parquet"
    proc = run_cli("profile", d / "m.dag.json", "--from-trace", trace, "-o", out, "--bandwidth", "100MB/s")
    assert proc.returncode == 0, proc.stderr
    assert "total compute time" in proc.stdout and "slowest ops" in proc.stdout
    df = pd.read_parquet(out)
    assert len(df) == len(g)
    send = g.sends()[0]
    assert df.set_index("op").loc[send.name, "time"] == pytest.approx(50e-6 + send.bytes / 100e6)
    assert load_times(out, g) == pytest.approx({**{op.name: 2e-6 for op in g.compute_ops()},
                                                **df.set_index("op")["time"].to_dict()})


def test_runs_zero_and_bad_units_are_clean_errors(tmp_path, synthetic):
    _, _, d = synthetic
    for runs in ("0", "-3"):
        assert_clean_error(run_cli("profile", SMALL_CNN, "--runs", runs, "-o", tmp_path / "o.csv"), "--runs")
    assert_clean_error(run_cli("profile", d / "m.dag.json", "--from-trace", "x.json", "--bandwidth", "fast"),
                       "bandwidth")
    assert_clean_error(run_cli("profile", d / "m.dag.json", "--from-trace", "x.json", "--latency", "-1ms"),
                       "latency")
    assert not (tmp_path / "o.csv").exists()


def test_assemble_oracle_reports_untimed_and_extra():
    g, times = random_dag(5, 2, seed=0)
    comp = pd.DataFrame({"op": ["f0", "f1", "ghost"], "time": [1.0, 2.0, 3.0], "runs": [5, 5, 5],
                         "median": [1.5, 2.5, 3.5]})
    r = assemble_oracle(g, comp, {"f2": "unsupported op"}, bandwidth=1e9, latency=1e-6)
    assert r.untimed == {"f2": "unsupported op", "f3": "no time was produced for it",
                         "f4": "no time was produced for it"}
    assert r.extra == ["ghost"]
    assert [op for op in r.frame["op"]] == [op.name for op in g.ops() if op.name not in r.untimed]
    with pytest.raises(OracleError, match="misses 3"):
        oracle_times(r.frame, g)
    filled = oracle_times(r.frame, g, default_time=0.5)
    assert filled["f3"] == 0.5 and filled["f0"] == 1.0


# -- analyses refuse bad oracles (exit 2, a clear message, no traceback) ----------------------------
def _oracle_cli(d, oracle, *extra):
    return run_cli(ORACLE_CMD, d / "m.dag.json", "--oracle", oracle, *extra)


def test_good_oracle_accepted(synthetic):
    _, _, d = synthetic
    proc = _oracle_cli(d, d / "good.csv", "--json")
    assert proc.returncode == 0, proc.stderr


def test_oracle_without_time_column(synthetic, tmp_path):
    g, times, d = synthetic
    p = tmp_path / "notime.csv"
    pd.DataFrame({"op": list(times), "seconds": list(times.values())}).to_csv(p, index=False)
    assert_clean_error(_oracle_cli(d, p), "notime.csv", "time")


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_oracle_negative_or_nan_time(synthetic, tmp_path, bad):
    g, times, d = synthetic
    t = dict(times)
    t["f3"] = bad
    p = tmp_path / "bad.csv"
    pd.DataFrame({"op": list(t), "time": list(t.values())}).to_csv(p, index=False)
    assert_clean_error(_oracle_cli(d, p), "bad.csv", "negative, NaN")


def test_oracle_of_another_model(synthetic, tmp_path):
    _, _, d = synthetic
    other, t = random_dag(8, 3, seed=9)
    p = tmp_path / "other.csv"
    pd.DataFrame({"op": [f"x/{k}" for k in t], "time": list(t.values())}).to_csv(p, index=False)
    assert_clean_error(_oracle_cli(d, p), "other.csv", "another model")


def test_partial_oracle_refused_then_default_time(synthetic, tmp_path):
    g, times, d = synthetic
    p = tmp_path / "partial.csv"
    drop = [op.name for op in g.compute_ops()][:2]
    pd.DataFrame({"op": [k for k in times if k not in drop],
                  "time": [v for k, v in times.items() if k not in drop]}).to_csv(p, index=False)
    proc = _oracle_cli(d, p)
    assert_clean_error(proc, "partial.csv", "--default-time", *drop)
    assert load_times(p, g, default_time=1e-3)[drop[0]] == 1e-3
    proc = _oracle_cli(d, p, "--default-time", "1ms", "--json")
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)) >= {"upper", "lower", "speedup"}


def test_unreadable_oracle(synthetic, tmp_path):
    _, _, d = synthetic
    p = tmp_path / "garbage.parquet"
    p.write_bytes(b"\x00\x01not parquet")
    assert_clean_error(_oracle_cli(d, p), "garbage.parquet", "cannot read")
    assert_clean_error(_oracle_cli(d, tmp_path / "absent.csv"), "absent.csv")


@pytest.mark.slow
def test_profile_dispatches_to_onnx(onnx_small_cnn, tmp_path):
    from dlsched.importers.loader import load_model

    out = tmp_path / "onnx.csv"
    proc = run_cli("profile", onnx_small_cnn, "-o", out, "--runs", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    g = load_model(str(onnx_small_cnn))
    df = pd.read_csv(out)
    comp = df[df["op"].isin([op.name for op in g.compute_ops()])]
    assert len(comp) + len(info["untimed"]) == len(g.compute_ops())
    assert (comp["time"] <= comp["median"]).all() and (comp.loc[comp["source"] == "profiled", "runs"] == 3).all()
    assert (df["source"] == "network-model").sum() == len(g.recvs())


@pytest.mark.slow
def test_profile_dispatches_to_tf_and_names_untimed(tmp_path):
    import sys

    sys.path.insert(0, str(REPO))
    from examples.build_keras import build_tf1
    from tests.conftest import CACHE

    pb = build_tf1(CACHE)["graphdef"]
    out = tmp_path / "tf.csv"
    proc = run_cli("profile", pb, "--mode", "training", "-o", out, "--runs", "2")
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(out)
    assert (df["source"] == "profiled").any() and (df["source"] == "network-model").sum() == 8  # 4 recv + 4 send
    untimed = set()
    from dlsched.importers.loader import load_model
    g = load_model(str(pb), mode="training")
    untimed = {op.name for op in g.compute_ops()} - set(df["op"])
    for name in untimed:  # every op without a row is named, with the warning
        assert name in proc.stderr
    if untimed:
        assert "--default-time" in proc.stderr
