"""The all-reduce simulator (issue 12, DESIGN §4.8): cost model, imbalance presets, eager-SGD's experiments
replayed through ``dlsched simulate --step-time``, the what-if on a model, and the model's invariants."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.allreduce_sim import COLLECTIVES, StepShape, majority_initiators, run_collective
from dlsched.analyses.collective_cost import allreduce_cost, recursive_doubling_allreduce, ring_allreduce
from dlsched.answers.collectives import Comparison, Network, Step, collectives
from dlsched.answers.options import ModelSpec, OracleSpec
from dlsched.analyses.imbalance import parse_imbalance
from dlsched.errors import DlschedError
from dlsched.formats.dag_json import save_dag
from dlsched.formats.oracle_file import write_oracle
from dlsched.synthetic import random_dag
from tests.conftest import assert_clean_error, run_cli

ALL = "allreduce,solo,majority"


def simulate_json(*args) -> dict:
    proc = run_cli("simulate", *args, "--json", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_cost_model():
    # ring: 2(P−1)α + 2(P−1)/P·n/β; recursive doubling: ⌈log2 P⌉(α + n/β)
    assert ring_allreduce(8, 8e6, 1e-4, 1e9) == pytest.approx(14e-4 + 14e-3)
    assert recursive_doubling_allreduce(8, 8e6, 1e-4, 1e9) == pytest.approx(3 * (1e-4 + 8e-3))
    assert recursive_doubling_allreduce(5, 0, 1.0, 1.0) == 3  # rounds up to the next power of two
    with pytest.raises(DlschedError, match="bandwidth"):
        allreduce_cost("ring", 4, 1, 0.0, 0.0)


@pytest.mark.parametrize("spec", ["random:k=0:delay=1ms", "random:k=1", "skew:log:1ms:2ms", "skew:linear:5ms:1ms",
                                  "rotate:1ms", "speed:1,-2", "speed:a,b", "lognormal:mean=0ms:sd=1ms:min=0:max=1",
                                  "gauss:1ms", "none:3", "random:k=1:delay=-3ms",
                                  # numbers that overflow the draws, or mean no run (issue 32)
                                  "lognormal:mean=1e-300s:sd=1s:min=0s:max=1s", "skew:linear:0s:1e9s",
                                  "rotate:1ms:2e300s", "random:k=1:delay=1e6s", "speed:1,1e308", "speed:1e-30,1",
                                  "lognormal:mean=1s:sd=1s:min=0s:max=1e300s"])
def test_bad_imbalance_refused(spec):
    with pytest.raises(DlschedError, match="--imbalance"):
        parse_imbalance(spec)


def test_overflowing_imbalance_is_a_clean_error():
    """Through both commands that take --imbalance: exit 2, one paragraph, no OverflowError traceback."""
    spec = "lognormal:mean=1e-300s:sd=1s:min=0s:max=1s"
    proc = run_cli("simulate", "--step-time", "10ms", "--collective", "solo", "--workers", "4", "--imbalance", spec)
    assert_clean_error(proc, "--imbalance", "sd must be at most")
    proc = run_cli("train-allreduce", "--processes", "2", "--iterations", "2", "--imbalance", spec)
    assert_clean_error(proc, "--imbalance", "sd must be at most")


def test_lognormal_and_trace(tmp_path):
    f, d = parse_imbalance("lognormal:mean=50ms:sd=20ms:min=10ms:max=200ms").draw(4, 4000, seed=2)
    assert (f == 1).all() and d.min() >= 0.01 and d.max() <= 0.2 and d.mean() == pytest.approx(0.05, rel=0.05)
    trace = tmp_path / "t.csv"
    trace.write_text("p0,p1,p2\n0.1,0,0\n0,0.2,0\n")
    d = parse_imbalance(f"trace:{trace}").draw(3, 5)[1]
    assert d[:, 1].tolist() == [0, 0.2, 0, 0.2, 0]  # repeated past its rows
    proc = run_cli("simulate", "--step-time", "10ms", "--collective", "solo", "--workers", "4",
                   "--imbalance", f"trace:{trace}")
    assert_clean_error(proc, "trace of 3 processes", "the run has 4")
    trace.write_text("0.1,x\n")
    with pytest.raises(DlschedError, match="one row per step"):
        parse_imbalance(f"trace:{trace}")


MICRO = ("--step-time", "1us", "--workers", "32", "--iterations", "64", "--compare", ALL, "--imbalance",
         "skew:linear:1ms:32ms", "--activation", "barrier", "--latency", "2us", "--gradient-size", "1KiB")


def test_fig9_micro_benchmark_through_the_cli():
    """Acceptance 1: 32 processes skewed 1–32 ms, 64 iterations, a barrier per iteration (Fig. 8).

    Majority's figures depend on its 64 random initiators, so they are pooled over 8 seeds (the paper's Fig. 9
    is one run: "on average 16 out of 32").
    """
    out = simulate_json(*MICRO)
    assert out["allreduce_s"] <= 0.2e-3 and out["activation"] == "barrier"
    c = out["collectives"]
    lat = {k: c[k]["mean_latency_s"] for k in COLLECTIVES}
    assert c["solo"]["mean_nap"] == 1.0
    assert lat["allreduce"] == pytest.approx(15.5e-3 + out["allreduce_s"], rel=0.01)
    assert lat["solo"] < lat["majority"] < lat["allreduce"]
    assert lat["allreduce"] / lat["solo"] >= 20
    assert len(c["solo"]["iteration_s_per_process"]) == 32 and len(c["majority"]["nap"]) == 64
    pooled = [collectives(ModelSpec(None), OracleSpec(None),
                          Comparison(["majority"], 32, 64, "skew:linear:1ms:32ms", activation="barrier", seed=s),
                          Step(1e-6, gradient_bytes=1024), Network(latency=2e-6))["collectives"]["majority"]
              for s in range(8)]
    assert abs(np.mean([m["mean_nap"] for m in pooled]) - 16) <= 1.5
    assert 1.8 <= lat["allreduce"] / np.mean([m["mean_latency_s"] for m in pooled]) <= 3.0


@pytest.mark.parametrize("delay, bracket", [(0.2, (1.40, 1.49)), (0.3, (1.59, 1.73)), (0.4, (1.76, 1.98))])
def test_hyperplane_replay(delay, bracket):
    """Issue 27, acceptance 1: the synchronous period is e + D; with the step all compute solo lies in the bracket
    a faithful model allows (the paper's 1.50 / 1.75 / 2.01 need a collective phase to skip)."""
    r = collectives(ModelSpec(None), OracleSpec(None),
                    Comparison(list(COLLECTIVES), 8, 256, f"random:k=1:delay={delay}s", seed=1),
                    Step(0.41, gradient_bytes=32768))["collectives"]
    assert 1 / r["allreduce"]["steps_per_s"] == pytest.approx(0.41 + delay, rel=0.01)
    assert bracket[0] <= r["solo"]["speedup"] <= bracket[1]
    assert r["majority"]["mean_nap"] > r["solo"]["mean_nap"]
    if delay == 0.2:
        assert 0.78 <= r["majority"]["steps_per_s"] / r["solo"]["steps_per_s"] <= 0.95


def test_collective_phase_lets_a_late_process_catch_up():
    """Issue 27: with 50 ms of the 0.41 s step a collective phase, solo reaches (e + D)/(e + a) within 3%."""
    out = simulate_json("--step-time", "0.41", "--collective-phase", "50ms", "--workers", "8", "--iterations",
                        "256", "--imbalance", "random:k=1:delay=200ms", "--compare", ALL, "--gradient-size", "32768")
    c, a = out["collectives"], out["activation_s"]
    assert out["step_compute_s"] == pytest.approx(0.36) and out["allreduce_s"] == pytest.approx(0.05)
    assert 1 / c["allreduce"]["steps_per_s"] == pytest.approx(0.61, rel=1e-6)  # (e − c) + D + c
    assert c["solo"]["speedup"] == pytest.approx(0.61 / (0.41 + a), rel=0.03)
    assert c["majority"]["speedup"] < c["solo"]["speedup"]


def test_rotating_imbalance_at_a_resnet32_step():
    """Issue 27, acceptance 2–3: §7.2.3 at a 0.05 s step; majority keeps models younger and replicas closer."""
    r = collectives(ModelSpec(None), OracleSpec(None),
                    Comparison(list(COLLECTIVES), 8, 256, "rotate:50ms:400ms", seed=0),
                    Step(0.05, gradient_bytes=32768))["collectives"]
    assert r["majority"]["speedup"] == pytest.approx(1.29, abs=0.08) and r["majority"]["speedup"] < r["solo"]["speedup"]
    assert r["solo"]["mean_nap"] <= 2 and r["majority"]["mean_nap"] == pytest.approx(4.5, abs=1)
    assert r["solo"]["mean_version_staleness"] >= 1.7 * r["majority"]["mean_version_staleness"]
    assert r["solo"]["missed_rate"] >= 2 * r["majority"]["missed_rate"] and r["solo"]["missed_rate"] > 0


def test_model_age_does_not_grow_with_drift():
    """The index lag grows with the run's length; the model's age (Lemma 6.1's τ) does not."""
    ages, lags = [], []
    for steps in (128, 512):
        c = collectives(ModelSpec(None), OracleSpec(None), Comparison(["solo"], 8, steps, "random:k=1:delay=200ms"),
                        Step(0.41, gradient_bytes=32768))["collectives"]["solo"]
        ages.append(c["mean_version_staleness"])
        lags.append(c["mean_staleness"])
    assert lags[1] > 1.5 * lags[0] and ages[1] == pytest.approx(ages[0], abs=0.1) and ages[1] < 1.2


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("allreduce_model")
    g, t = random_dag(40, 10, training=True, seed=5)
    t = {**t, **{op.name: 1e-4 + op.bytes / 1e9 for op in g.recvs() + g.sends()}}  # α = 100 us, β = 1 GB/s
    save_dag(g, d / "m.dag.json")
    write_oracle(pd.DataFrame({"op": list(t), "time": list(t.values())}), d / "o.csv")
    return d


def test_what_if_on_a_model(model):
    """Acceptance item 4: the user's model, DDP buckets, α and β from the oracle, three collectives."""
    args = (model / "m.dag.json", "--oracle", model / "o.csv", "--workers", "4", "--iterations", "50",
            "--compare", ALL, "--bucket-mb", "0.5")
    flat = simulate_json(*args)
    assert flat["buckets"] > 1 and flat["alpha_s"] == pytest.approx(1e-4) and flat["beta_Bps"] == pytest.approx(1e9)
    rates = {k: c["steps_per_s"] for k, c in flat["collectives"].items()}
    assert max(rates.values()) == pytest.approx(min(rates.values()), rel=1e-9)
    out = simulate_json(*args, "--imbalance", "speed:1,1,1,3")
    c = out["collectives"]
    assert c["solo"]["speedup"] > c["majority"]["speedup"] > 1 and c["solo"]["mean_staleness"] > 0
    table = run_cli("simulate", *args, "--imbalance", "random:k=1:delay=50ms")
    assert table.returncode == 0 and "collectives compared" in table.stdout and "majority" in table.stdout


def test_buckets_overlap_backward():
    """DDP buckets in backward's production order, each all-reduced while backward goes on (DESIGN §4.8)."""
    from dlsched.analyses.ddp_buckets import step_shape

    g, t = random_dag(40, 12, training=True, seed=7)
    shape = step_shape(g, t, bucket_bytes=256 * 1024)
    assert len(shape.bucket_bytes) > 2 and list(shape.bucket_offsets) == sorted(shape.bucket_offsets)
    ones, zeros = np.ones((3, 4)), np.zeros((3, 4))
    run = run_collective("allreduce", shape, ones, zeros, 1e-4, 2e8)
    costs = [allreduce_cost("ring", 4, n, 1e-4, 2e8) for n in shape.bucket_bytes]
    step = run.done[0]
    assert step < shape.compute_s + sum(costs)  # the earlier buckets hid behind backward
    assert step >= max(shape.compute_s + costs[-1], shape.bucket_offsets[0] + sum(costs)) - 1e-12


@given(st.integers(1, 12), st.integers(1, 30), st.integers(0, 99))
def test_imbalance_draws(P, T, seed):
    d = parse_imbalance("rotate:10ms:80ms").draw(P, T, seed)[1]
    assert all(sorted(row) == sorted(d[0]) for row in d) and (P == 1 or len(set(d[:, 0])) == min(P, T))
    k = (P + 1) // 2
    d = parse_imbalance(f"random:k={k}:delay=5ms").draw(P, T, seed)[1]
    assert ((d > 0).sum(axis=1) == k).all()
    assert (d == parse_imbalance(f"random:k={k}:delay=5ms").draw(P, T, seed)[1]).all()


def test_bad_usage_exits_2(model):
    assert_clean_error(run_cli("simulate", "--step-time", "1s", "--compare", "solo,tac"), "mixes collectives")
    assert_clean_error(run_cli("simulate", "--step-time", "50ms", "--collective-phase", "50ms", "--collective",
                               "solo"), "shorter than --step-time")
    assert_clean_error(run_cli("simulate", model / "m.dag.json", "--oracle", model / "o.csv", "--collective-phase",
                               "1ms"), "splits a --step-time")
    assert_clean_error(run_cli("simulate", "--compare", "solo"), "--step-time")
    assert_clean_error(run_cli("simulate", "--step-time", "1s", "--collective", "solo", "--imbalance",
                               "random:k=9:delay=1ms", "--workers", "8"), "k=9")
    g, t = random_dag(10, 3, seed=1)  # an inference graph: no gradients to all-reduce
    save_dag(g, model / "inf.dag.json")
    write_oracle(pd.DataFrame({"op": list(t), "time": list(t.values())}), model / "inf.csv")
    assert_clean_error(run_cli("simulate", model / "inf.dag.json", "--oracle", model / "inf.csv", "--collective",
                               "solo"), "--mode training")


# -- invariants (acceptance 6, simulator side) -------------------------------------------------------------------

runs = st.fixed_dictionaries({
    "P": st.integers(1, 9), "T": st.integers(1, 40), "seed": st.integers(0, 2**16),
    "step": st.floats(1e-4, 1.0), "alpha": st.floats(0, 1e-3), "nbytes": st.integers(0, 10**7),
    "buckets": st.integers(1, 4), "algorithm": st.sampled_from(["ring", "recursive-doubling"]),
    "activation": st.sampled_from(["free-running", "barrier"])})


def _shape(r) -> StepShape:
    k = r["buckets"]
    return StepShape(r["step"], tuple(r["step"] * (b + 1) / k for b in range(k)), (r["nbytes"] // k,) * k)


def _imbalance(r):
    rng = np.random.default_rng(r["seed"])
    return rng.uniform(0.5, 3, (r["T"], r["P"])), rng.exponential(0.1, (r["T"], r["P"])) * (rng.random((r["T"], r["P"])) < 0.5)


@settings(max_examples=60, deadline=None)
@given(runs, st.sampled_from(COLLECTIVES))
def test_every_gradient_enters_one_collective_or_stays_queued(r, kind):
    f, d = _imbalance(r)
    run = run_collective(kind, _shape(r), f, d, r["alpha"], 1e9, r["algorithm"], r["seed"], r["activation"])
    T, P = d.shape
    # Replay the send buffers (Algorithm 2): each collective takes every gradient buffered by its trigger.
    entered = np.full((T, P), T)
    for j in range(T):
        for p in range(P):
            for k in range(T):
                if entered[k, p] == T and run.arrival[k, p] <= run.trigger[j]:
                    entered[k, p] = j
    assert (entered == run.entered).all()
    assert len(run.staleness) + run.queued_at_end == T * P and (run.staleness >= 0).all()
    active = run.arrival <= run.trigger[:, None]
    assert (run.entered[active] == np.nonzero(active)[0]).all()  # an active process's gradient is fresh
    assert (run.nap == active.sum(axis=1)).all() and (np.diff(run.done) > 0).all()


@settings(max_examples=40, deadline=None)
@given(runs)
def test_majority_initiator_is_seeded_and_active(r):
    f, d = _imbalance(r)
    run = run_collective("majority", _shape(r), f, d, r["alpha"], 1e9, r["algorithm"], r["seed"], r["activation"])
    other = run_collective("majority", _shape(r), f[::-1], d[::-1], r["alpha"], 1e9, r["algorithm"], r["seed"],
                           r["activation"])
    assert run.initiator.tolist() == other.initiator.tolist() == majority_initiators(r["P"], r["T"], r["seed"]).tolist()
    j = np.arange(r["T"])
    assert (run.arrival[j, run.initiator] == run.trigger).all() and (run.nap >= 1).all()


@settings(max_examples=40, deadline=None)
@given(runs)
def test_zero_imbalance_same_throughput_and_partial_never_slower(r):
    ones, zeros = np.ones((r["T"], r["P"])), np.zeros((r["T"], r["P"]))
    args = (_shape(r), r["alpha"], 1e9, r["algorithm"], r["seed"], r["activation"])
    rates = [run_collective(k, args[0], ones, zeros, *args[1:]).steps_per_s for k in COLLECTIVES]
    assert rates[1] == pytest.approx(rates[0], rel=1e-12) and rates[2] == pytest.approx(rates[0], rel=1e-12)
    f, d = _imbalance(r)
    sync, solo, major = (run_collective(k, args[0], f, d, *args[1:]) for k in COLLECTIVES)
    assert solo.done[-1] <= sync.done[-1] * (1 + 1e-12) and major.done[-1] <= sync.done[-1] * (1 + 1e-12)
    assert math.isfinite(sync.steps_per_s) and (sync.nap == r["P"]).all()
    if r["buckets"] == 1:  # one all-reduce at the end of the step: every step waits for the slowest process
        cost = allreduce_cost(r["algorithm"], r["P"], r["nbytes"], r["alpha"], 1e9)
        assert sync.done[-1] == pytest.approx(sum((f * r["step"] + d).max(axis=1)) + r["T"] * cost, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(runs, st.sampled_from(COLLECTIVES), st.integers(0, 6))
def test_model_age_is_the_straightforward_count(r, kind, sync_every):
    """The model's age equals a plain count; it never exceeds the lag; the limiter bounds the lag by N − 1."""
    f, d = _imbalance(r)
    run = run_collective(kind, _shape(r), f, d, r["alpha"], 1e9, r["algorithm"], r["seed"], r["activation"],
                         sync_every=sync_every)
    T, P = d.shape
    ages, lags = [], []
    for k in range(T):
        for p in range(P):
            j = run.entered[k, p]
            if j == T:
                continue
            held = 0 if k == 0 else sum(1 for i in range(T) if run.done[i] <= run.leave[k - 1, p])
            ages.append(j - held)
            lags.append(j - k)
    assert run.model_age.tolist() == ages and run.staleness.tolist() == lags
    assert all(0 <= a <= lag for a, lag in zip(ages, lags))
    if sync_every:
        assert max(lags, default=0) <= sync_every - 1
        assert (run.nap[sync_every - 1::sync_every] == P).all()
