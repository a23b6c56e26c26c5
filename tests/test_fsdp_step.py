"""FSDP2's units and step on CPU (analyses/fsdp_units.py, fsdp_step.py): by hand, and properties over random layer stacks."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.ddp_step import HostCosts
from dlsched.analyses.fsdp_step import ALL_GATHER, REDUCE_SCATTER, FsdpNetwork, FsdpSchedule, fsdp_step
from dlsched.analyses.fsdp_units import ROOT, fsdp_units, padded_bytes
from dlsched.dag import COMPUTE, RECV, Graph, add_gradient_sends
from dlsched.errors import DlschedError

FREE = HostCosts(copy_bandwidth=1e18, optimizer_s_per_byte=0.0)


def _stack(sizes, times=None, head=0):
    """Layers m0 → m1 → … each with weight ``mi.w`` of ``sizes[i]`` float32 elements, forward ``fi`` and backward
    ``bi`` (which reads the weight and yields its gradient); ``head`` > 0 adds a root-owned weight ``w`` on top."""
    g = Graph("stack", "training")
    n = len(sizes)
    times = times or [1.0] * (2 * n)
    names = [f"m{i}.w" for i in range(n)] + (["w"] if head else [])
    for p, k in zip(names, list(sizes) + ([head] if head else [])):
        g.add_op(p, RECV, bytes=4 * k, params=k, shape=[k], dtypes=["float32"])
    fwd = [f"f{i}" for i in range(n)] + (["fh"] if head else [])
    bwd = [f"b{i}" for i in range(n)] + (["bh"] if head else [])
    for f in fwd:
        g.add_op(f, COMPUTE, phase="forward")
    for b in reversed(bwd):
        g.add_op(b, COMPUTE, phase="backward")
    for i, (p, f, b) in enumerate(zip(names, fwd, bwd)):
        g.add_edge(p, f)
        g.add_edge(p, b)
        if i:
            g.add_edge(fwd[i - 1], f)
            g.add_edge(b, bwd[i - 1])
    g.add_edge(fwd[-1], bwd[-1])
    add_gradient_sends(g, dict(zip(names, bwd)))
    t = dict(zip(fwd + bwd, list(times[:n]) + ([1.0] if head else []) + list(times[n:]) + ([1.0] if head else [])))
    return g, t


def test_units_own_by_deepest_prefix_in_forward_order():
    g, _ = _stack([10, 20, 30], head=6)
    units = fsdp_units(g, ["m2", "m0"], workers=4)
    assert [u.module for u in units] == [ROOT, "m0", "m2"]
    assert units[0].params == ("m1.w", "w") and units[2].bytes == 120
    assert units[1].padded_bytes == padded_bytes([10], 40, 4) == 48 and units[1].shard_bytes == 12


@pytest.mark.parametrize("modules, words", [(["m9"], "owns no parameter"), (["m0", "m0"], "given twice"),
                                            ([""], "not a module path")])
def test_units_refuse_what_is_not_a_unit(modules, words):
    g, _ = _stack([4, 4])
    with pytest.raises(DlschedError, match=words):
        fsdp_units(g, modules, workers=2)


def test_default_on_cpu_serialises_and_async_prefetch_hides_by_hand():
    """Two 1 MB units, 1 s per op, 1 s per collective (P = 2, β = 0.5 MB/s). Default: every collective blocks
    the thread, 4 all-gathers and 2 reduce-scatters after 4 s of compute: 10 s. One-ahead prefetch both ways
    with async all-gathers: m1's forward all-gather hides behind f0, m0's backward one behind b1: 8 s."""
    g, t = _stack([250_000, 250_000])
    units = fsdp_units(g, ["m0", "m1"], workers=2)
    net = FsdpNetwork(2, 0.0, 0.5e6, 0.0, 0.5e6)
    default = fsdp_step(g, t, units, FsdpSchedule(), net, FREE)
    assert default.step_s == pytest.approx(10) == pytest.approx(default.upper_s)
    assert [(c.kind, c.unit) for c in default.collectives] == [
        (ALL_GATHER, "m0"), (ALL_GATHER, "m1"), (ALL_GATHER, "m1"), (ALL_GATHER, "m0"), (REDUCE_SCATTER, "m1"),
        (REDUCE_SCATTER, "m0")]
    sync = FsdpSchedule(forward_prefetch={"m0": ["m1"]}, backward_prefetch={"m1": ["m0"]})
    assert fsdp_step(g, t, units, sync, net, FREE).step_s == pytest.approx(10)  # prefetching alone hides nothing
    both = FsdpSchedule(forward_prefetch={"m0": ["m1"]}, backward_prefetch={"m1": ["m0"]}, unshard_async=True)
    step = fsdp_step(g, t, units, both, net, FREE)
    assert step.step_s == pytest.approx(8)
    assert [c.unit for c in step.collectives] == ["m0", "m1", "m1", "m0", "m1", "m0"]
    assert [x for c in step.collectives for x in (c.start, c.end)] == pytest.approx(
        [0, 1, 1, 2, 3, 4, 4, 5, 5, 6, 7, 8], abs=1e-6)


def test_keeping_a_unit_unsharded_skips_its_backward_all_gather_and_costs_memory():
    g, t = _stack([250_000, 250_000])
    units = fsdp_units(g, ["m0", "m1"], workers=2)
    net = FsdpNetwork(2, 0.0, 0.5e6, 0.0, 0.5e6)
    resharded = fsdp_step(g, t, units, FsdpSchedule(), net, FREE)
    kept = fsdp_step(g, t, units, FsdpSchedule(reshard_after_forward={"m1": False}), net, FREE)
    assert kept.figures()["all_gathers"] == 3 and kept.step_s == pytest.approx(9)
    # both peak in m1's reduce-scatter: 1 MB of shards, the prefetched m0 unsharded, m1's gradients copied
    # into the reduce-scatter's input, gloo's clone of it, and the 0.5 MB output shard
    assert kept.peak_bytes == resharded.peak_bytes == 4_500_000
    g, t = _stack([250_000] * 4)
    names = ["m0", "m1", "m2", "m3"]
    units = fsdp_units(g, names, workers=2)
    every = fsdp_step(g, t, units, FsdpSchedule(reshard_after_forward=dict.fromkeys(names, False)), net, FREE)
    # all four held from the forward; at m3's reduce-scatter m0-m2 still are, beside the input, its clone
    # and the output shard: 2 + 3 + 1 + 1 + 0.5 MB. Resharded, the peak is in m1's backward: m1 and the
    # prefetched m0, m1's gradients, m2's input (held until m1's post-backward), 2 output shards: 2 + 5 MB
    assert every.peak_bytes == 7_500_000 > fsdp_step(g, t, units, FsdpSchedule(), net, FREE).peak_bytes == 7_000_000


def test_bad_schedules_are_refused():
    g, t = _stack([8, 8])
    units = fsdp_units(g, ["m0", "m1"], workers=2)
    net = FsdpNetwork(2, 0.0, 1e6, 0.0, 1e6)
    with pytest.raises(DlschedError, match="'m7', which is not a unit"):
        fsdp_step(g, t, units, FsdpSchedule(reshard_after_forward={"m7": False}), net)
    with pytest.raises(DlschedError, match="cannot prefetch itself"):
        fsdp_step(g, t, units, FsdpSchedule(forward_prefetch={"m0": ["m0"]}), net)
    with pytest.raises(DlschedError, match="at least 2 processes"):
        fsdp_step(g, t, units, FsdpSchedule(), FsdpNetwork(1, 0.0, 1e6, 0.0, 1e6))


@st.composite
def _cases(draw):
    n = draw(st.integers(2, 7))
    sizes = draw(st.lists(st.integers(1, 400_000), min_size=n, max_size=n))
    times = draw(st.lists(st.floats(0.01, 2.0), min_size=2 * n, max_size=2 * n))
    head = draw(st.sampled_from([0, 1000]))
    mods = sorted(draw(st.sets(st.sampled_from([f"m{i}" for i in range(n)]), min_size=1)))
    workers = draw(st.integers(2, 8))
    reshard = {m: draw(st.booleans()) for m in mods}
    depth = draw(st.integers(0, 2))
    order = sorted(mods, key=lambda m: int(m[1:]))
    fwd = {a: order[i + 1:i + 1 + depth] for i, a in enumerate(order)} if depth else {}
    bwd = {a: order[max(0, i - depth):i][::-1] for i, a in enumerate(order)} if depth else {}
    sched = FsdpSchedule(reshard, fwd, bwd, draw(st.booleans()))
    return sizes, times, head, mods, workers, sched


@settings(max_examples=60, deadline=None)
@given(_cases(), st.floats(1e5, 1e8), st.floats(0, 1e-3))
def test_step_bounds_collectives_and_memory(case, beta, alpha):
    sizes, times, head, mods, workers, sched = case
    g, t = _stack(sizes, times, head)
    units = fsdp_units(g, mods, workers)
    net = FsdpNetwork(workers, alpha, beta, alpha, beta * 1.3)
    step = fsdp_step(g, t, units, sched, net, FREE)
    assert step.lower_s - 1e-9 <= step.step_s <= step.upper_s + 1e-9
    if not sched.unshard_async:  # every collective blocks the one thread
        assert step.step_s == pytest.approx(step.upper_s)
    non_root = [u for u in units if u.module != ROOT]
    ags = sum(1 + sched.reshards(u.module) for u in non_root) + (len(units) - len(non_root))
    assert step.figures()["all_gathers"] == ags and step.figures()["reduce_scatters"] == len(units)
    ends = [c.end for c in step.collectives]
    assert ends == sorted(ends)  # one link, in issue order
    shards = sum(u.shard_bytes for u in units)
    assert step.peak_bytes >= shards + max(u.padded_bytes for u in units) - 1e-6


def test_fsdp2s_own_work_is_charged_at_four_hooks_of_every_unit():
    g, t = _stack([250_000, 250_000], head=8)
    units = fsdp_units(g, ["m0", "m1"], workers=2)
    net = FsdpNetwork(2, 0.0, 0.5e6, 0.0, 0.5e6)
    bare = fsdp_step(g, t, units, FsdpSchedule(), net, FREE)
    hooked = fsdp_step(g, t, units, FsdpSchedule(), net, HostCosts(1e18, 0.0, per_hook_s=0.25))
    assert hooked.step_s == pytest.approx(bare.step_s + 4 * len(units) * 0.25) == pytest.approx(hooked.upper_s)
