"""Per-worker batch sizes (LB-BSP, paper 002): closed form, exact solver, caps, equal split."""
from __future__ import annotations

import itertools

import numpy as np

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.errors import DlschedError
from dlsched.planning.batch import interpolated_time_curve, linear_time_curve
from dlsched.planning.hetero import (WorkerSpec, equal_split, plan_workers, split_exact,
                                     split_proportional)


def test_closed_form_paper_example():
    assert split_proportional(128, [10, 20, 30, 40]) == [13, 26, 38, 51]


def test_closed_form_clamps_and_redistributes():
    # worker 3 would take 51.2 but holds 30: the other 98 go 1:2:3 → 16.3, 32.7, 49 → rounded
    b = split_proportional(128, [10, 20, 30, 40], caps=[100, 100, 100, 30])
    assert b[3] == 30 and sum(b) == 128
    assert b == [16, 33, 49, 30]


def test_too_large_global_batch_names_largest_feasible():
    with pytest.raises(DlschedError, match="add up to 60"):
        split_proportional(61, [1, 2], caps=[20, 40])
    with pytest.raises(DlschedError, match="add up to 60"):
        split_exact(61, [lambda b: b, lambda b: b], caps=[20, 40])


def _brute(total, curves, caps):
    best = None
    for combo in itertools.product(*(range(c + 1) for c in caps)):
        if sum(combo) != total:
            continue
        t = max(curve(b) for curve, b in zip(curves, combo))
        if best is None or t < best:
            best = t
    return best


workers = st.lists(
    st.tuples(st.integers(0, 8),  # cap
              st.lists(st.integers(0, 5), min_size=8, max_size=8)),  # increments of a monotone curve
    min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(workers, st.integers(0, 12))
def test_exact_matches_brute_force(ws, total):
    caps = [c for c, _ in ws]
    curves = []
    for _, inc in ws:
        vals = [0]
        for d in inc:
            vals.append(vals[-1] + d)
        curves.append(lambda b, v=tuple(vals): float(v[int(b)]))
    if total > sum(caps):
        with pytest.raises(DlschedError, match=f"add up to {sum(caps)}"):
            split_exact(total, curves, caps)
        return
    b = split_exact(total, curves, caps)
    assert sum(b) == total
    assert all(0 <= x <= c for x, c in zip(b, caps))
    assert max(curve(x) for curve, x in zip(curves, b)) == _brute(total, curves, caps)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 50), st.integers(0, 200)), min_size=1, max_size=8),
       st.integers(0, 400))
def test_closed_form_sums_and_respects_caps(ws, total):
    speeds = [v for v, _ in ws]
    caps = [c for _, c in ws]
    if total > sum(caps):
        with pytest.raises(DlschedError, match=str(sum(caps))):
            split_proportional(total, speeds, caps)
        return
    b = split_proportional(total, speeds, caps)
    assert sum(b) == total
    assert all(0 <= x <= c for x, c in zip(b, caps))
    # without binding caps every worker is within 1 of its exact share
    if all(total * v / sum(speeds) <= c - 1 for v, c in zip(speeds, caps)):
        assert all(abs(x - total * v / sum(speeds)) < 1 for x, v in zip(b, speeds))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.5, 8), min_size=1, max_size=4), st.integers(0, 12))
def test_closed_form_near_exact_for_linear_curves(speeds, total):
    """Largest-remainder rounding costs at most one sample's time on any worker."""
    curves = [lambda b, v=v: b / v for v in speeds]
    exact = split_exact(total, curves)
    closed = split_proportional(total, speeds)
    t_exact = max(c(b) for c, b in zip(curves, exact))
    t_closed = max(c(b) for c, b in zip(curves, closed))
    assert t_exact <= t_closed + 1e-12
    assert t_closed <= t_exact + max(1 / v for v in speeds) + 1e-9


def test_plan_reports_weights_and_equal_split():
    ref = linear_time_curve(0.8, 8)  # 0.1 s per sample on the reference device
    specs = [WorkerSpec(f"w{i}", cap, (lambda b, s=s: ref(b) / s), speed=s)
             for i, (s, cap) in enumerate([(1.0, 64), (2.0, 64), (3.0, 64), (4.0, 20)])]
    plan = plan_workers(specs, 100)
    assert plan.method == "closed-form"
    assert sum(plan.batches) == 100 and plan.batches[3] == 20
    assert plan.equal == equal_split(100, 4) == [25, 25, 25, 25]
    assert plan.equal_split_violations == ["w3"]
    assert sum(plan.weights()) == pytest.approx(4)
    assert plan.iteration_time < plan.equal_split_time
    d = plan.to_dict()
    assert [w["name"] for w in d["workers"]] == ["w0", "w1", "w2", "w3"]
    assert d["equal_split_fits_memory"] is False
    assert list(plan.frame().columns)[:6] == ["worker", "speed", "memory", "max_batch", "batch", "time"]


def test_measured_curves_use_exact_solver():
    slow = interpolated_time_curve({8: 0.4, 16: 0.6, 32: 1.0})   # launch overhead, sublinear
    fast = interpolated_time_curve({8: 0.1, 16: 0.2, 32: 0.4})
    plan = plan_workers([WorkerSpec("slow", 64, slow, linear=False), WorkerSpec("fast", 64, fast, linear=False)], 48)
    assert plan.method == "exact"
    assert sum(plan.batches) == 48
    best = min(max(slow(b), fast(48 - b)) for b in range(0, 49))
    assert plan.iteration_time == pytest.approx(best)


def test_interpolated_curve_is_monotone_and_extrapolates():
    c = interpolated_time_curve({4: 1.0, 8: 0.9, 16: 2.0})
    assert c(8) == 1.0  # running maximum removes the dip
    assert c(32) == pytest.approx(2.0 + 16 * (1.0 / 8))
    # below the smallest batch the first segment (flat here) extends: the fixed cost stays, no line to the origin
    assert c(0) == c(2) == 1.0


def test_curve_below_smallest_batch_keeps_the_fixed_cost():
    # issue 13: fast 0.05 + 0.005·b, slow 0.3 + 0.03·b, measured at 16/32/64, X = 40
    true = {"fast": lambda b: 0.05 + 0.005 * b, "slow": lambda b: 0.3 + 0.03 * b}
    specs = [WorkerSpec(n, 64, interpolated_time_curve({b: f(b) for b in (16, 32, 64)}), linear=False)
             for n, f in true.items()]
    plan = plan_workers(specs, 40)
    assert plan.batches == [40, 0]
    assert plan.iteration_time == pytest.approx(0.25)
    achieved = max(true[w.name](b) for w, b in zip(plan.workers, plan.batches) if b > 0)
    assert achieved == pytest.approx(0.25)
    assert plan.removed == ["slow"] and plan.to_dict()["remove_workers"] == ["slow"]
    assert specs[1].curve(4) == pytest.approx(0.42)  # the true time of 4 samples, not 0.195 through the origin


def test_curve_clamps_a_convex_start_at_the_fit_intercept():
    c = interpolated_time_curve({16: 0.1, 32: 0.5, 64: 1.3})   # extension would reach 0 at b = 12
    intercept = float(np.polyfit([16, 32, 64], [0.1, 0.5, 1.3], 1)[1])
    assert c(0) == pytest.approx(max(0.0, intercept))
    assert all(c(b) <= c(b + 1) for b in range(0, 80))
    one = interpolated_time_curve({8: 0.4})  # a single point: nothing to extend, scales through the origin
    assert one(4) == pytest.approx(0.2)
