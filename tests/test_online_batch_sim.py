"""The online batch simulator (speed traces against policies), ``dlsched replay-batch``, and plan-batch's curve fix."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.answers.replay_batch import SpeedSource, replay_batch
from dlsched.planning.online_batch_sim import read_trace, scenario_trace, simulate_policies, table3_trace
from dlsched.errors import DlschedError
from tests.conftest import assert_clean_error, run_cli


def test_scenarios_and_optimum():
    step = scenario_trace("step", workers=3, iterations=10)
    assert step.per_sample[4, 0] == pytest.approx(0.01) and step.per_sample[5, 0] == pytest.approx(0.03)
    periodic = scenario_trace("periodic", workers=2, iterations=80)
    assert periodic.per_sample[20:40, 1].tolist() == [0.04] * 20 and periodic.cpu[19, 1] == 1.0
    assert step.times(0, [10, 0, 5]).tolist() == pytest.approx([0.15, 0.0, 0.2])
    split, t = step.optimum(0, 60)
    assert sum(split) == 60 and t == pytest.approx(max(0.05 + 0.01 * (i + 1) * b for i, b in enumerate(split)))
    with pytest.raises(DlschedError, match="unknown speed-trace scenario"):
        scenario_trace("bursty")
    with pytest.raises(DlschedError, match="fig8 scenario has 4 workers"):
        scenario_trace("fig8", workers=3)


def test_simulator_frames_and_gap():
    res = simulate_policies(scenario_trace("step", workers=3, iterations=40), ["bsp", "lbbsp-cpu:memoryless", "bsp"],
                            60)
    assert set(res.steps.columns) >= {"policy", "iteration", "worker", "batch", "time", "speed", "predicted"}
    assert len(res.steps) == 2 * 40 * 3 and len(res.iterations) == 2 * 40
    assert (res.steps.groupby(["policy", "iteration"]).batch.sum() == 60).all()
    assert (res.iterations.gap >= -1e-9).all()           # nothing beats the balanced optimum without noise
    s = res.summary().set_index("policy")
    assert s.loc["bsp", "vs_bsp"] == 1 and s.loc["lbbsp-cpu:memoryless", "vs_bsp"] < 0.8
    # after the step at iteration 20 the memoryless split is proportional, near the optimum again at once
    assert s.loc["lbbsp-cpu:memoryless", "final_gap"] < 0.1
    assert json.dumps(res.to_dict())


def test_table3_predictors_short():
    """A short Table 3 run (32 workers, 400 iterations; the 2,000-iteration one is benchmarks/bench_lbbsp_sim.py)."""
    res = simulate_policies(table3_trace(32, 400, seed=1), ["bsp", "lbbsp-cpu:memoryless", "lbbsp-cpu:ema",
                                                            "lbbsp-cpu:narx"], 1024, seed=1)
    s = res.summary().set_index("policy")
    assert (s.loc[["lbbsp-cpu:memoryless", "lbbsp-cpu:ema", "lbbsp-cpu:narx"], "vs_bsp"] < 0.6).all()
    assert s.loc["lbbsp-cpu:narx", "rmse"] < s.loc["lbbsp-cpu:ema", "rmse"]
    assert s.loc["lbbsp-cpu:narx", "rmse"] < s.loc["lbbsp-cpu:memoryless", "rmse"]


def test_measured_trace_file(tmp_path):
    rows = [{"iteration": k, "worker": w, "batch": 16, "time": 0.1 * (w + 1) * (2 if k >= 3 and w == 0 else 1),
             "cpu": 0.5 if k >= 3 and w == 0 else 1.0} for k in range(6) for w in range(2)]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    trace = read_trace(tmp_path / "t.csv")
    assert (trace.iterations, trace.workers) == (6, 2)
    assert trace.times(0, [16, 16]).tolist() == pytest.approx([0.1, 0.2])
    assert trace.times(4, [8, 16]).tolist() == pytest.approx([0.1, 0.2])
    res = replay_batch(SpeedSource(trace=tmp_path / "t.csv"), ["lbbsp-cpu:memoryless"], 32)
    assert res.summary().final_batches[0] == [16, 16]
    with pytest.raises(DlschedError, match="has 2 workers, not the 3"):
        replay_batch(SpeedSource(trace=tmp_path / "t.csv", workers=3), ["bsp"], 32)
    pd.DataFrame(rows[:-1]).to_csv(tmp_path / "gap.csv", index=False)
    with pytest.raises(DlschedError, match="one row per iteration and worker"):
        read_trace(tmp_path / "gap.csv")
    (tmp_path / "cols.csv").write_text("iteration,worker,latency\n0,0,1\n")
    with pytest.raises(DlschedError, match="needs columns"):
        read_trace(tmp_path / "cols.csv")
    (tmp_path / "neg.csv").write_text("iteration,worker,speed\n0,0,-3\n")
    with pytest.raises(DlschedError, match="positive"):
        read_trace(tmp_path / "neg.csv")
    (tmp_path / "idle.csv").write_text("iteration,worker,batch,time\n0,0,8,0.5\n1,0,0,0\n2,0,8,1.0\n")
    assert read_trace(tmp_path / "idle.csv").per_sample[:, 0].tolist() == pytest.approx([1 / 16, 1 / 16, 1 / 8])
    (tmp_path / "never.csv").write_text("iteration,worker,batch,time\n0,0,0,0\n1,0,0,0\n")
    with pytest.raises(DlschedError, match="never has a positive speed"):
        read_trace(tmp_path / "never.csv")
    # A missing measurement is refused, not filled in from the neighbouring iteration (issue 32, item 4).
    (tmp_path / "nan.csv").write_text("iteration,worker,batch,time\n0,0,8,0.5\n1,0,8,nan\n2,0,8,1.0\n")
    with pytest.raises(DlschedError, match="data row 2: time"):
        read_trace(tmp_path / "nan.csv")
    assert_clean_error(run_cli("replay-batch", "--trace", tmp_path / "nan.csv"), "nan.csv", "miss a value or hold NaN")


def test_replay_cli_table_json_and_plot(tmp_path):
    png = tmp_path / "b.png"
    proc = run_cli("replay-batch", "--scenario", "fig8", "--iterations", "300", "--plot", png, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    gpu = next(p for p in out["policies"] if p["policy"] == "lbbsp-gpu")
    assert gpu["final_batches"] == [96, 13, 13, 6] and out["global_batch"] == 128
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    proc = run_cli("replay-batch", "--scenario", "periodic", "--iterations", "80", "--policy", "bsp",
                   "--policy", "lbbsp-cpu:narx")
    assert proc.returncode == 0, proc.stderr
    assert "lbbsp-cpu:narx" in proc.stdout and "final batches, bsp: 32 32 32 32" in proc.stdout


def test_replay_cli_bad_input(tmp_path):
    assert_clean_error(run_cli("replay-batch", "--policy", "lbbsp-fast"), "unknown batch policy 'lbbsp-fast'")
    assert_clean_error(run_cli("replay-batch", "--policy", "bsp", "--global-batch", "3"),
                       "cannot give each of the 4 workers")
    pd.DataFrame([{"iteration": k, "worker": w, "speed": 10.0} for k in range(3) for w in range(2)]).to_csv(
        tmp_path / "t.csv", index=False)
    assert_clean_error(run_cli("replay-batch", "--trace", tmp_path / "t.csv", "--workers", "4"),
                       "has 2 workers, not the 4")
    (tmp_path / "bad.csv").write_bytes(b"\x00\xff garbage")
    assert_clean_error(run_cli("replay-batch", "--trace", tmp_path / "bad.csv"), "bad.csv")


def test_plan_batch_says_remove_the_worker_the_split_drops(tmp_path):
    """Issue 13's pair through plan-batch: fast 0.05 + 0.005·b, slow 0.3 + 0.03·b measured at 16/32/64, X = 40."""
    from dlsched.formats.dag_json import save_dag
    from dlsched.synthetic import random_dag

    g, _ = random_dag(20, 5, training=True, seed=1)
    save_dag(g, tmp_path / "m.dag.json")
    times = {n: {b: round(a + s * b, 6) for b in (16, 32, 64)} for n, a, s in (("fast", 0.05, 0.005),
                                                                              ("slow", 0.3, 0.03))}
    (tmp_path / "c.yaml").write_text("global_batch: 40\nworkers:\n" + "".join(
        f"  - {{name: {n}, memory: 1GiB, times: {t}}}\n" for n, t in times.items()))
    proc = run_cli("plan-batch", tmp_path / "m.dag.json", "--cluster", tmp_path / "c.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "remove slow" in proc.stdout and "250 ms" in proc.stdout
    proc = run_cli("plan-batch", tmp_path / "m.dag.json", "--cluster", tmp_path / "c.yaml", "--json")
    out = json.loads(proc.stdout)
    assert [w["batch"] for w in out["workers"]] == [40, 0] and out["remove_workers"] == ["slow"]
    assert out["iteration_time"] == pytest.approx(0.25)


def test_cluster_bandwidth_adds_the_transfer_term():
    from dlsched.planning import batch as batchplan
    from dlsched.planning.cluster_file import parse_cluster, worker_specs
    from dlsched.planning.memory import MemoryEstimate

    est = MemoryEstimate("m", "static", "sgd", param_bytes=1e6, activation_bytes_per_sample=10)
    cluster = parse_cluster({"workers": [{"name": "a", "memory": "1GiB", "times": {8: 0.1, 16: 0.2}},
                                         {"name": "b", "memory": "1GiB", "times": {8: 0.1, 16: 0.2},
                                          "bandwidth": "8Mbit/s"}]}, "c.yaml")
    specs, unit, _ = worker_specs(cluster.workers, est, 0.1, batchplan.TimeReference())
    assert specs[1].curve(16) == pytest.approx(specs[0].curve(16) + 1.0)   # 1 MB over 1 MB/s
    assert not specs[1].linear and unit == "s"
    with pytest.raises(DlschedError, match="bandwidth"):
        parse_cluster({"workers": [{"name": "a", "memory": "1GiB", "bandwidth": "fast"}]}, "c.yaml")


def test_noise_keeps_the_fig8_split_near_the_optimum():
    res = replay_batch(SpeedSource(scenario="fig8", noise=0.02, seed=3), ["lbbsp-gpu"])
    it = res.iterations
    assert it[it.iteration.between(100, 149)].iteration_time.mean() <= 1.602 * 1.03
    assert np.isfinite(res.summary().final_gap[0])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0.001, 0.1), st.integers(1, 80)), min_size=1, max_size=5),
       st.integers(1, 200))
def test_bisection_optimum_equals_the_exact_split(workers, X):
    from dlsched.planning.online_batch_sim import SpeedTrace

    a, s, caps = (np.array([[w[j] for w in workers]], dtype=float) for j in range(3))
    X = min(X, int(caps.sum()))
    trace = SpeedTrace(a, s, np.ones_like(a), np.zeros_like(a), np.ones_like(a))
    caps = caps[0].astype(int).tolist()
    assert trace.optimum_time(0, X, caps) == pytest.approx(trace.optimum(0, X, caps)[1], rel=1e-9)
