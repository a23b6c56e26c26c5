"""TicTac's bounds of measured steps and the replay of a step as a DAG (issue 28, DESIGN §4.9).

Real traces: the public GPU/CPU traces in ../shared/traces and CPU training traces made here with
torch.profiler (one process, and a 2-rank gloo DDP job), cached under the tests' cache dir.
"""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses.bounds import bounds
from dlsched.analyses.trace_bounds import _intersect, _length, _subtract, _union, trace_bounds
from dlsched.analyses.trace_replay import build_step, median_error, predict, replay_trace
from dlsched.formats.kineto_trace import KinetoTrace, read_kineto
from tests.conftest import CACHE, REPO
from tests.trace_files import shared_trace

SHARED = ["ddp_resnet18_actckpt_8xMI300X_rank0.json.gz", "nccl_rank0_of16.json.gz", "alexnet_1gpu.json.gz",
          "cpu_only_gloo_rank34.json.gz", "cpu_only_rank0_2424ops.json.gz", "simple_add_kineto.json.gz"]
TRACES = CACHE / "replay_traces_v1"


def _generated(kind: str) -> list:
    """The cached CPU training traces of ``tests/replay_traces.py`` (made on first use)."""
    names = ["train_1proc.json"] if kind == "one" else ["ddp_rank0.json", "ddp_rank1.json"]
    if not all((TRACES / n).is_file() for n in names):
        cmd = [sys.executable, "-m", "tests.replay_traces", str(TRACES)] + (["ddp"] if kind == "ddp" else [])
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    return [read_kineto(TRACES / n) for n in names]


@pytest.fixture(scope="module")
def one_process():
    return _generated("one")[0]


@pytest.fixture(scope="module")
def ddp_ranks():
    return _generated("ddp")


# -- the interval helpers ------------------------------------------------------------------------

intervals = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=12)


@given(intervals, intervals)
def test_interval_union_intersection_and_difference_agree_with_a_unit_grid(a, b):
    grid = np.zeros((2, 80), bool)
    for row, iv in enumerate((a, b)):
        for s, d in iv:
            grid[row, s:s + d] = True
    ua = _union([s for s, _ in a], [s + d for s, d in a])
    ub = _union([s for s, _ in b], [s + d for s, d in b])
    assert _length(ua) == grid[0].sum() and _length(ub) == grid[1].sum()
    assert _length(_intersect(ua, ub)) == (grid[0] & grid[1]).sum()
    assert _length(_subtract(ua, ub)) == (grid[0] & ~grid[1]).sum()
    assert np.all(np.diff(ua[:, 0]) > 0) and np.all(ua[1:, 0] > ua[:-1, 1])


# -- bounds --------------------------------------------------------------------------------------

def _check_bounds(trace, label):
    rows = trace_bounds(trace)
    assert rows, label
    for b in rows:
        assert b.upper == pytest.approx(b.compute + b.communication)
        assert b.lower == pytest.approx(max(b.compute, b.communication))
        assert b.makespan >= b.lower - 1e-12
        if b.efficiency is not None:
            assert 0.0 <= b.efficiency <= 1.0 and b.model_error == 0.0
            assert b.lower - 1e-12 <= b.makespan <= b.upper + 1e-12
        else:  # outside [L, U]: a model error with its size, never an E outside [0, 1]
            assert b.model_error != 0.0
            assert b.model_error == pytest.approx(b.makespan - (b.upper if b.makespan > b.upper else b.lower))
        assert 0.0 <= b.busy_efficiency <= 1.0
        print(f"{label} step {b.step}: U={b.upper * 1e3:.3f} L={b.lower * 1e3:.3f} m={b.makespan * 1e3:.3f} ms "
              f"E={b.efficiency} model error={b.model_error * 1e3:.3f} ms idle={b.idle * 1e3:.3f} ms")
    return rows


@pytest.mark.parametrize("name", SHARED)
def test_bounds_of_every_step_of_the_shared_traces(name):
    _check_bounds(read_kineto(shared_trace(name)), name)


def test_bounds_of_the_rocm_ddp_steps_rate_their_overlap():
    rows = _check_bounds(read_kineto(shared_trace("ddp_resnet18_actckpt_8xMI300X_rank0.json.gz")), "rocm")
    assert [b.step for b in rows] == [15, 16, 17]
    for b in rows:  # a device-bound DDP step: both resources busy, the all-reduce partly hidden
        assert b.resources == "device" and b.compute > 0.005 and b.communication > 0.01
        assert b.efficiency is not None and 0.3 < b.efficiency < 0.9


def test_bounds_of_the_host_bound_16_gpu_steps_are_model_errors_of_the_idle_device():
    for b in _check_bounds(read_kineto(shared_trace("nccl_rank0_of16.json.gz")), "nccl16"):
        # the device works about 70 of the step's 216 ms: the rest is host-bound idle no schedule explains
        assert b.efficiency is None and b.model_error > 0.1 * b.makespan
        assert b.idle > b.model_error


def test_bounds_of_generated_cpu_traces(one_process, ddp_ranks):
    for t in [one_process] + ddp_ranks:
        for b in _check_bounds(t, t.path.name):
            assert b.resources == "host"
    comm = [b.communication for t in ddp_ranks for b in trace_bounds(t)]
    assert all(c > 0 for c in comm)  # gloo's all-reduces are the collective resource


# -- replay against measured steps ---------------------------------------------------------------

def _report(trace, label):
    rs = replay_trace(trace)
    for r in rs:
        print(f"{label} step {r.step}: measured {r.measured * 1e3:.3f} ms, predicted {r.predicted * 1e3:.3f} ms, "
              f"error {r.error:+.2%}")
    print(f"{label}: median |error| {median_error(rs):.2%} over {len(rs)} steps")
    return rs


@pytest.mark.parametrize("name", SHARED)
def test_replay_error_of_every_shared_trace_is_printed(name):
    rs = _report(read_kineto(shared_trace(name)), name)
    assert rs and all(r.predicted > 0 and math.isfinite(r.error) for r in rs)
    assert median_error(rs) <= 0.10


def test_replay_of_generated_cpu_traces_within_10_percent(one_process, ddp_ranks):
    for t in [one_process] + ddp_ranks:
        rs = _report(t, t.path.name)
        assert len(rs) == 4 and median_error(rs) <= 0.10


def _shift(sg, kind, factor):
    return {n: sg.times[n] * factor for n, k in sg.kinds.items() if k == kind}


def test_replay_rederives_times_a_kernel_before_a_sync_moves_the_step():
    sg = build_step(read_kineto(shared_trace("alexnet_1gpu.json.gz")))
    base, _ = predict(sg)
    g = sg.graph.nx
    awaited = [n for n in sg.kernels if any(sg.kinds[s] == "sync" for s in g.successors(n))]
    k = max(awaited, key=lambda n: sg.times[n])
    longer, _ = predict(sg, {k: sg.times[k] + 0.010})
    gone, _ = predict(sg, {k: 0.0})
    assert longer == pytest.approx(base + 0.010, rel=0, abs=2e-4)  # the host waited for it
    assert gone < base
    assert predict(sg, _shift(sg, "kernel", 2.0))[0] > base > predict(sg, _shift(sg, "kernel", 0.5))[0]


def test_replay_of_a_host_bound_step_follows_its_host_work():
    sg = build_step(read_kineto(shared_trace("ddp_resnet18_actckpt_8xMI300X_rank0.json.gz")), 16)
    base, _ = predict(sg)
    assert base == pytest.approx(sg.measured, rel=0.10)
    # kernels run ~30 ms behind the host, which never waits for them: the step does not move
    assert predict(sg, _shift(sg, "kernel", 2.0))[0] == pytest.approx(base)
    # half the host work (forward on the main thread, backward on the autograd thread) shortens the step
    assert predict(sg, _shift(sg, "host", 0.5))[0] < 0.75 * base


def _waited_steps(trace: KinetoTrace) -> list[int]:
    """Steps whose gloo all-reduces all ended before the step's optimizer step began, as DDP waits for them.

    On a starved machine gloo's worker thread can close its record after the main thread moved on (the
    record then ends past the step); such a step shows no wait for the replay to keep.
    """
    from dlsched.profiling.kineto_events import steps

    ev = trace.events
    out = []
    for s in steps(ev).itertuples():
        inside = ev[(ev["ts"] >= s.ts) & (ev["ts"] < s.end)]
        gloo = inside[inside["name"] == "gloo:all_reduce"]
        opt = inside[inside["name"].str.startswith("Optimizer.step")]
        if len(gloo) and len(opt) and gloo["end"].max() <= opt["ts"].min():
            out.append(int(s.step))
    return out


def test_replay_of_ddp_on_gloo_waits_for_the_all_reduce(ddp_ranks):
    waited = _waited_steps(ddp_ranks[0])
    assert waited, "no step of the generated DDP trace waited for its all-reduces"
    for step in waited:
        sg = build_step(ddp_ranks[0], step)
        base, _ = predict(sg)
        coll = [n for n in sg.graph.nx if sg.graph.op(n).op_type == "gloo:all_reduce"]
        assert coll
        later, _ = predict(sg, {n: sg.times[n] + 0.050 for n in coll})
        assert later > base + 0.040, step  # the main thread waits for gloo before the optimizer step
        assert predict(sg, {n: 0.0 for n in coll})[0] <= base


# -- synthetic traces: invariants ------------------------------------------------------------------

def _synthetic(plan, streams):
    """A self-consistent one-thread GPU step: host ops that launch kernels or synchronise."""
    rows = []
    free = dict.fromkeys(range(streams), 0.0)
    t, corr = 5.0, 1
    for gap, dur, what, stream, kdur in plan:
        t += gap
        start = t
        t += dur / 2
        if what == "launch":
            s = stream % streams
            rows.append(("cudaLaunchKernel", "cuda_runtime", "1", t, 3.0, corr, -1))
            k0 = max(t + 3.0, free[s])
            rows.append((f"kernel{corr}", "kernel", "7", k0, kdur, corr, s))
            free[s] = k0 + kdur
            t += 3.0
        else:
            end = max(t, max(free.values())) + 1.0
            rows.append(("cudaDeviceSynchronize", "cuda_runtime", "1", t, end - t, corr, -1))
            t = end
        corr += 1
        t += dur / 2
        rows.append(("aten::op", "cpu_op", "1", start, t - start, -1, -1))
    rows.append(("ProfilerStep#1", "user_annotation", "1", 0.0, t + 5.0, -1, -1))
    ev = pd.DataFrame(rows, columns=["name", "cat", "tid", "ts", "dur", "correlation", "stream"])
    ev = ev.assign(pid="1", end=ev.ts + ev.dur, external_id=-1, args=None).sort_values("ts", kind="stable")
    return KinetoTrace("synthetic.json", ev.reset_index(drop=True))


plans = st.lists(st.tuples(st.floats(0, 20), st.floats(1, 30), st.sampled_from(["launch", "launch", "sync"]),
                           st.integers(0, 2), st.floats(0.5, 80)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans, st.integers(1, 3), st.data())
def test_replay_invariants_on_synthetic_traces(plan, streams, data):
    trace = _synthetic(plan, streams)
    sg = build_step(trace, 1)
    pred, makespan = predict(sg)
    assert pred == pytest.approx(sg.measured, rel=1e-9)  # a self-consistent step replays exactly
    b = bounds(sg.graph, sg.times)
    assert b.lower - 1e-12 <= makespan <= b.upper + 1e-12
    main_load = math.fsum(sg.times[n] for n in sg.main)
    assert main_load - 1e-12 <= pred <= b.upper + 1e-12
    if sg.kernels:
        k = data.draw(st.sampled_from(sorted(sg.kernels)))
        f = data.draw(st.floats(0, 1))
        p2, m2 = predict(sg, {k: sg.times[k] * f})
        assert p2 <= pred + 1e-12 and m2 <= makespan + 1e-12  # shortening a kernel never lengthens the step
