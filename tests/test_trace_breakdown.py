"""The interval unions and the per-step time breakdown: exact against brute force, invariants by hypothesis, real traces."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses import intervals as iv
from dlsched.analyses.trace_breakdown import FIGURES, breakdown, hta_breakdown
from dlsched.formats.kineto_trace import KinetoTrace, TraceError, read_kineto
from tests.trace_files import shared_trace

# Integer intervals on a short line: a brute-force union is the set of unit cells covered.
_iv = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=25)


def _cells(pairs) -> set[int]:
    return {c for s, d in pairs for c in range(s, s + d)}


@settings(max_examples=300, deadline=None)
@given(_iv, _iv, st.integers(0, 80), st.integers(0, 80))
def test_union_covered_subtract_match_brute_force(a, b, lo, hi):
    lo, hi = min(lo, hi), max(lo, hi)
    ma = iv.merge([s for s, _ in a], [s + d for s, d in a])
    mb = iv.merge([s for s, _ in b], [s + d for s, d in b])
    ca, cb = _cells(a), _cells(b)
    assert iv.length(ma) == len(ca)
    assert np.all(ma[0][1:] > ma[1][:-1])  # disjoint, sorted, touching ones merged
    assert iv.covered(ma, [lo], [hi])[0] == len({c for c in ca if lo <= c < hi})
    assert iv.length(iv.union(ma, mb)) == len(ca | cb)
    assert iv.length(iv.subtract(ma, mb)) == len(ca - cb)


_KIND_NAMES = {"compute": ("sm80_xmma_gemm", "kernel"), "communication": ("ncclDevKernel_AllReduce", "kernel"),
               "memory": ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy")}


def _events(rows) -> KinetoTrace:
    ev = pd.DataFrame(rows, columns=["name", "cat", "pid", "tid", "ts", "dur", "stream"])
    ev["end"] = ev["ts"] + ev["dur"]
    ev["correlation"] = ev["external_id"] = -1
    ev["args"] = None
    return KinetoTrace(path="synthetic.json", events=ev.sort_values("ts", ignore_index=True))


_dev = st.lists(st.tuples(st.sampled_from(sorted(_KIND_NAMES)), st.floats(0, 1000), st.floats(0, 200),
                          st.integers(1, 4)), max_size=40)
_steps = st.lists(st.tuples(st.floats(1, 400), st.floats(0, 50)), min_size=1, max_size=4)


def _check_partition(table: pd.DataFrame) -> None:
    for r in table.itertuples():
        assert r.compute + r.exposed_communication + r.memory_only + r.idle == pytest.approx(r.span, abs=1e-6)
        assert r.overlap <= min(r.compute, r.communication) + 1e-6
        assert r.overlap + r.exposed_communication == pytest.approx(r.communication, abs=1e-6)
        assert r.busy <= r.span + 1e-6
        for f in FIGURES:
            assert getattr(r, f) >= 0, f


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dev, _steps)
def test_device_step_partition_is_exact(dev, step_spans):
    rows, t = [], 0.0
    for i, (dur, gap) in enumerate(step_spans):
        rows.append((f"ProfilerStep#{i}", "user_annotation", "1", "1", t, dur, -1))
        t += dur + gap
    for kind, ts, dur, stream in dev:
        name, cat = _KIND_NAMES[kind]
        rows.append((name, cat, "0", str(stream), ts, dur, stream))
    b = breakdown(_events(rows))
    assert b.mode == ("device" if dev else "host")  # no device event: a CPU-only trace
    assert len(b.steps) == len(step_spans)
    _check_partition(b.steps)
    _check_partition(pd.DataFrame([b.whole]))
    # Per-step compute is the step's share of the whole union: steps never count a microsecond twice.
    assert b.steps["compute"].sum() <= b.whole["compute"] + 1e-6


_host = st.lists(st.tuples(st.booleans(), st.floats(0, 1000), st.floats(0, 200), st.integers(1, 3)), max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_host, st.floats(50, 1200))
def test_host_step_partition_is_exact(ops, span):
    rows = [("ProfilerStep#1", "user_annotation", "1", "1", 0.0, span, -1)]
    for comm, ts, dur, tid in ops:
        rows.append(("gloo:all_reduce" if comm else "aten::addmm", "cpu_op", "1", str(tid), ts, dur, -1))
    b = breakdown(_events(rows))
    assert b.mode == "host"
    _check_partition(b.steps)


def test_host_compute_leaves_out_collectives_on_its_own_thread():
    """A thread blocked in a collective is not computing; a gloo thread beside it is overlap."""
    b = breakdown(_events([
        ("ProfilerStep#3", "user_annotation", "1", "1", 0.0, 100.0, -1),
        ("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", "1", "1", 0.0, 60.0, -1),
        ("c10d::allreduce_", "cpu_op", "1", "1", 40.0, 20.0, -1),      # inside the op above, same thread
        ("gloo:all_reduce", "user_annotation", "1", "9", 30.0, 50.0, -1),  # gloo's worker thread
        ("Optimizer.step#SGD.step", "user_annotation", "1", "1", 85.0, 5.0, -1),
    ]))
    s = b.steps.iloc[0]
    assert (s.compute, s.communication, s.overlap, s.exposed_communication, s.idle) == (45.0, 50.0, 10.0, 40.0, 15.0)


@pytest.mark.parametrize("name", ["cpu_only_gloo_rank34.json.gz", "cpu_only_rank0_2424ops.json.gz"])
def test_cpu_steps_agree_with_the_bounds_of_a_measured_step(name):
    """On a CPU-only trace the breakdown's compute and communication are trace_bounds' C and N."""
    from dlsched.analyses.trace_bounds import trace_bounds

    t = read_kineto(shared_trace(name))
    b = breakdown(t).steps.set_index("step")
    rated = trace_bounds(t)
    assert len(rated) == len(b) > 0
    for r in rated:
        assert r.resources == "host"
        row = b.loc[r.step]
        assert row.compute == pytest.approx(r.compute * 1e6, abs=1e-3)
        assert row.communication == pytest.approx(r.communication * 1e6, abs=1e-3)
        assert row.overlap == pytest.approx(r.overlap * 1e6, abs=1e-3)


def test_real_gpu_trace_steps_partition_their_spans():
    t = read_kineto(shared_trace("nccl_rank0_of16.json.gz"))
    b = breakdown(t)
    assert b.mode == "device" and list(b.steps["step"]) == [550, 551, 552, 553, 554]
    _check_partition(b.steps)
    assert (b.steps["span"] == t.events[t.events["name"].str.startswith("ProfilerStep#")]
            .drop_duplicates("name")["dur"].to_numpy()).all()
    # NCCL's all-to-all and reduce-scatter kernels are busy in every step, and mostly exposed.
    assert (b.steps["communication"] > 0).all() and (b.steps["exposed_communication"] > b.steps["overlap"]).all()


def test_cpu_only_trace_is_timed_from_host_ops():
    b = breakdown(read_kineto(shared_trace("cpu_only_gloo_rank34.json.gz")))
    assert b.mode == "host"
    _check_partition(b.steps)
    assert b.whole["communication"] > 1e6  # gloo:all_reduce on two worker threads, about 1.1 s
    with pytest.raises(TraceError, match="no GPU events"):
        hta_breakdown(read_kineto(shared_trace("cpu_only_rank0_2424ops.json.gz")))


def test_the_reader_gives_the_garbage_collector_back(tmp_path):
    """read_kineto pauses the cyclic collector while decoding; it is running again after a read and after a refusal."""
    import gc

    assert gc.isenabled()
    read_kineto(shared_trace("cpu_only_gloo_rank34.json.gz"))
    assert gc.isenabled()
    bad = tmp_path / "cut.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}, {"ph": "X", "na')
    with pytest.raises(TraceError):
        read_kineto(bad)
    assert gc.isenabled()
    gc.disable()
    try:  # a caller that turned it off keeps it off
        read_kineto(shared_trace("cpu_only_gloo_rank34.json.gz"))
        assert not gc.isenabled()
    finally:
        gc.enable()
