"""``dlsched plan-batch`` through the CLI: single device, heterogeneous workers, cluster files, errors."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from dlsched.synthetic import random_dag
from tests.conftest import REPO, assert_clean_error, run_cli


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A synthetic training DAG (forward outputs [8, 16] float32) and its oracle."""
    from dlsched.formats.dag_json import save_dag
    from dlsched.formats.oracle_file import write_oracle

    d = tmp_path_factory.mktemp("plan")
    g, times = random_dag(40, 10, training=True, seed=3)
    path = d / "syn.dag.json"
    save_dag(g, path)
    oracle = d / "syn.csv"
    write_oracle(pd.DataFrame({"op": list(times), "time": list(times.values()),
                               "resource": [g.op(n).resource for n in times]}), oracle)
    compute = sum(t for n, t in times.items() if g.op(n).kind == "compute")
    return g, str(path), str(oracle), compute


def _json(*args, ok=True):
    proc = run_cli("plan-batch", *args, "--json", timeout=600)
    if ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)
    return proc


def test_single_device_plan(synthetic):
    from dlsched.planning.memory import static_estimate

    g, path, oracle, compute = synthetic
    est = static_estimate(g, optimizer="adam")
    cap = 20_000_000
    out = _json(path, "--memory", str(cap), "--optimizer", "adam", "--oracle", oracle)
    b = out["batch"]
    assert out["estimate"] == "static" and out["memory"]["estimate"] == "static"
    assert est.total(b) <= 0.9 * cap < est.total(b + 1)
    mem = out["memory"]
    assert mem["optimizer_state"] == 2 * mem["parameters"]
    assert mem["total"] == pytest.approx(est.total(b))
    # throughput from the oracle: Σ compute time at batch 8, linear in batch
    row = {r["batch"]: r for r in out["throughput"]}
    assert row[b]["time"] == pytest.approx(compute * b / 8)
    assert row[b]["samples_per_s"] == pytest.approx(8 / compute)
    proc = run_cli("plan-batch", path, "--memory", str(cap), "--optimizer", "adam", "--oracle", oracle)
    assert proc.returncode == 0 and f"largest batch {b}" in proc.stdout and "static" in proc.stdout
    assert "activations per sample" in proc.stdout and "optimizer state" in proc.stdout


def test_margin_changes_plan(synthetic):
    _, path, _, _ = synthetic
    wide = _json(path, "--memory", "20000000", "--margin", "0")["batch"]
    narrow = _json(path, "--memory", "20000000", "--margin", "50%")["batch"]
    assert wide > narrow > 0


def test_closed_form_through_cli(synthetic):
    _, path, _, _ = synthetic
    out = _json(path, "--global-batch", "128", "--worker", "a:1GiB:10", "--worker", "b:1GiB:20",
                "--worker", "c:1GiB:30", "--worker", "d:1GiB:40")
    assert [w["name"] for w in out["workers"]] == ["a", "b", "c", "d"]
    assert [w["batch"] for w in out["workers"]] == [13, 26, 38, 51]
    assert out["method"] == "closed-form"
    assert [w["weight"] for w in out["workers"]] == pytest.approx([4 * b / 128 for b in (13, 26, 38, 51)])
    assert out["iteration_time"] == pytest.approx(max(b / v for b, v in zip((13, 26, 38, 51), (10, 20, 30, 40))))
    assert out["equal_split_time"] == pytest.approx(32 / 10)
    assert out["equal_split_fits_memory"] is True


def test_global_batch_above_caps_exits_2(synthetic):
    _, path, _, _ = synthetic
    args = [path, "--worker", "a:10MB:1", "--worker", "b:11MB:2"]
    caps = [w["max_batch"] for w in _json(*args, "--global-batch", "1")["workers"]]
    assert all(c > 0 for c in caps)
    total = sum(caps)
    ok = _json(*args, "--global-batch", str(total))
    assert [w["batch"] for w in ok["workers"]] == caps
    proc = _json(*args, "--global-batch", str(total + 1), ok=False)
    assert_clean_error(proc, f"add up to {total}", "largest feasible global batch")


def test_cluster_file(synthetic):
    _, path, _, _ = synthetic
    out = _json(path, "--cluster", str(REPO / "examples" / "cluster.yaml"))
    assert out["global_batch"] == 256 and out["method"] == "exact"
    assert [w["name"] for w in out["workers"]] == ["v100-0", "v100-1", "p100", "k80"]
    assert sum(w["batch"] for w in out["workers"]) == 256
    assert out["iteration_time"] <= out["equal_split_time"]
    assert out["time_unit"] == "s"
    over = _json(path, "--cluster", str(REPO / "examples" / "cluster.yaml"), "--global-batch", "64")
    assert over["global_batch"] == 64


def test_bad_inputs_exit_2(synthetic, tmp_path):
    _, path, _, _ = synthetic
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers:\n  - name: a\n    memory: 1GiB\n    speed: 1\n    times: {8: 1}\n")
    assert_clean_error(run_cli("plan-batch", path, "--cluster", bad, "--global-batch", "4"), str(bad),
                       "more than one")
    bad.write_text("workers: [\n")
    assert_clean_error(run_cli("plan-batch", path, "--cluster", bad), "not valid YAML")
    assert_clean_error(run_cli("plan-batch", path, "--worker", "a:1GiB"), "--global-batch")
    assert_clean_error(run_cli("plan-batch", path, "--global-batch", "8", "--worker", "a:lots"), "memory size")
    assert_clean_error(run_cli("plan-batch", path), "--memory")
    assert_clean_error(run_cli("plan-batch", path, "--memory", "1KB"), "even at batch 1")
    assert_clean_error(run_cli("plan-batch", path, "--memory", "1GiB", "--margin", "1.5"), "margin")


def test_inference_graph_refused(tmp_path):
    from dlsched.formats.dag_json import save_dag

    g, _ = random_dag(10, 3, training=False)
    save_dag(g, tmp_path / "inf.dag.json")
    assert_clean_error(run_cli("plan-batch", tmp_path / "inf.dag.json", "--memory", "1GiB"), "training graph")


def test_measure_needs_factory_and_device(synthetic):
    _, path, _, _ = synthetic
    assert_clean_error(run_cli("plan-batch", path, "--memory", "1GiB", "--measure"), "factory")
    import torch

    if not torch.cuda.is_available():
        proc = run_cli("plan-batch", "examples/torch_models.py:small_cnn", "--memory", "1GiB", "--measure",
                       "--device", "cuda")
        assert_clean_error(proc, "no CUDA device")


def test_measured_throughput_table():
    out = _json("examples/torch_models.py:small_cnn", "--memory", "64MB", "--measure",
                "--measure-batches", "4,8", "--optimizer", "adam")
    assert out["estimate"] == "measured"
    assert [m["batch"] for m in out["measurements"]] == [4, 8]
    assert all(m["seconds"] > 0 for m in out["measurements"])
    assert {r["batch"] for r in out["throughput"]} == {4, 8, out["batch"]}
    assert out["memory"]["optimizer_state"] == 2 * out["memory"]["parameters"]


def test_cluster_file_with_oracles_per_device(synthetic, tmp_path):
    """A worker with its own oracle is linear in batch from that oracle; speeds scale the reference."""
    import shutil

    _, path, oracle, compute = synthetic
    shutil.copy(oracle, tmp_path / "dev.csv")
    (tmp_path / "c.yaml").write_text(
        "global_batch: 90\nworkers:\n"
        "  - {name: ref2x, memory: 1GiB, speed: 2}\n"
        "  - {name: own, memory: 1GiB, oracle: dev.csv}\n")
    out = _json(path, "--cluster", tmp_path / "c.yaml", "--oracle", oracle)
    ws = {w["name"]: w for w in out["workers"]}
    assert out["method"] == "closed-form" and out["time_unit"] == "s"
    assert ws["own"]["speed"] == pytest.approx(1.0)
    assert (ws["ref2x"]["batch"], ws["own"]["batch"]) == (60, 30)
    assert ws["own"]["time"] == pytest.approx(compute * 30 / 8)
    assert out["iteration_time"] == pytest.approx(compute * 30 / 8)
    # a bare speed has no reference when another worker's times are in seconds
    proc = run_cli("plan-batch", path, "--cluster", tmp_path / "c.yaml")
    assert_clean_error(proc, "only a speed", "--oracle")


def test_heterogeneous_iteration_time_counts_the_transfers(synthetic, tmp_path):
    """The split balances compute; every worker still waits for the transfers its compute does not hide."""
    from dlsched.analyses.orders import compute_order
    from dlsched.analyses.simulate import simulate
    from dlsched.formats.oracle_file import write_oracle

    g, path, oracle, compute = synthetic
    df = pd.read_csv(oracle)
    df.loc[df.resource != "compute:0", "time"] *= 100  # slow links: transfers that compute cannot hide
    oracle = tmp_path / "slow-links.csv"
    write_oracle(df, oracle)
    times = dict(df[["op", "time"]].itertuples(index=False))
    exposed = simulate(g, times, compute_order(g, "tac", times)).makespan - compute
    out = _json(path, "--oracle", oracle, "--batch", "8", "--global-batch", "128", "--worker", "a:1GiB:1",
                "--worker", "b:1GiB:2")
    assert out["transfer_time"] == pytest.approx(exposed) and exposed > 0
    assert out["iteration_time"] == pytest.approx(max(w["time"] for w in out["workers"]) + exposed)
    no_oracle = _json(path, "--global-batch", "128", "--worker", "a:1GiB:1", "--worker", "b:1GiB:2")
    assert no_oracle["transfer_time"] is None
    assert no_oracle["iteration_time"] == pytest.approx(max(w["time"] for w in no_oracle["workers"]))
