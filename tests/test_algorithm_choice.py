"""Eq. 6 of paper 003: one algorithm per layer under a workspace bound, against brute force."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.errors import DlschedError
from dlsched.planning.algorithm_choice import MAX, SUM, choose_algorithms, dominant_algorithms

# Small whole numbers give ties in time and workspace; any float gives real-valued sums.
value = st.one_of(st.integers(0, 4).map(float), st.floats(0, 100, allow_nan=False, allow_infinity=False))
layer = st.integers(1, 3).flatmap(lambda p: st.tuples(st.lists(value, min_size=p, max_size=p),
                                                      st.lists(value, min_size=p, max_size=p)))
instance = st.lists(layer, min_size=1, max_size=6)


def brute_force(times, workspaces, bound, constraint):
    """(time, workspace) of the best choice by enumeration: least time, then least workspace; None if none fits."""
    best = None
    for choice in itertools.product(*(range(len(t)) for t in times)):
        ws = [w[a] for w, a in zip(workspaces, choice)]
        need = sum(ws) if constraint == SUM else max(ws)
        if need <= bound:
            key = (sum(t[a] for t, a in zip(times, choice)), need)
            best = key if best is None or key < best else best
    return best


@settings(max_examples=400, deadline=None)
@given(instance, st.data(), st.sampled_from([SUM, MAX]))
def test_equals_brute_force(layers, data, constraint):
    times = [t for t, _ in layers]
    workspaces = [w for _, w in layers]
    # bounds right at a reachable need (the boundary), between needs, or below every need
    some = [data.draw(st.integers(0, len(t) - 1)) for t in times]
    at = [w[a] for w, a in zip(workspaces, some)]
    bound = data.draw(st.one_of(st.just(sum(at) if constraint == SUM else max(at)),
                                st.floats(-1, 650, allow_nan=False), st.just(math.inf)))
    got = choose_algorithms(times, workspaces, bound, constraint)
    expected = brute_force(times, workspaces, bound, constraint)
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert (got.time, got.workspace) == expected
    # the reported figures are the chosen algorithms' own
    ws = [w[a] for w, a in zip(workspaces, got.algorithms)]
    assert got.time == sum(t[a] for t, a in zip(times, got.algorithms))
    assert got.workspace == (sum(ws) if constraint == SUM else max(ws)) <= bound


def integer_knapsack(times, workspaces, bound):
    """Least time with Σ workspace ≤ bound, by a DP over whole-number workspace (exact for integer workspaces)."""
    best = np.full(bound + 1, np.inf)
    best[0] = 0.0
    for t, w in zip(times, workspaces):
        nxt = np.full(bound + 1, np.inf)
        for tl, wl in zip(t, w):
            if wl <= bound:
                nxt[wl:] = np.minimum(nxt[wl:], best[:bound + 1 - wl] + tl)
        best = nxt
    return best.min()


@pytest.mark.parametrize("seed", range(5))
def test_many_layers_equal_an_integer_dp(seed):
    """40 layers of 4 algorithms, too many to enumerate: the frontier solver equals a capacity DP."""
    rng = np.random.default_rng(seed)
    times = [rng.integers(1, 1000, 4).astype(float) / 7 for _ in range(40)]
    workspaces = [rng.integers(0, 60, 4) for _ in range(40)]
    bound = int(sum(w.min() for w in workspaces) + 0.4 * sum(w.max() - w.min() for w in workspaces))
    got = choose_algorithms(times, workspaces, bound)
    assert got.workspace <= bound
    assert got.time == pytest.approx(integer_knapsack(times, workspaces, bound), rel=1e-12)


def test_sum_and_max_differ_as_the_paper_and_frameworks_do():
    # conv1's FFT alone fits the bound, but not beside conv2's FFT
    times, workspaces = [[2.0, 1.0], [2.0, 1.0]], [[1.0, 6.0], [1.0, 6.0]]
    assert choose_algorithms(times, workspaces, 8.0).time == 3.0  # sum: one FFT
    assert choose_algorithms(times, workspaces, 8.0, MAX).algorithms == (1, 1)  # max: both


def test_unbounded_takes_the_fastest_and_negative_fits_nothing():
    times, workspaces = [[3.0, 1.0, 2.0]], [[0.0, 9.0, 1.0]]
    assert choose_algorithms(times, workspaces, math.inf).algorithms == (1,)
    assert choose_algorithms(times, workspaces, -1.0) is None
    assert choose_algorithms(times, workspaces, -1.0, MAX) is None


def test_no_layers_is_an_empty_choice():
    assert choose_algorithms([], [], 0.0).time == 0.0
    assert choose_algorithms([], [], 0.0, MAX).workspace == 0.0


def test_dominant_algorithm_per_layer():
    # layer 0: algorithm 1 is as fast and leaner (no trade-off); layer 1: faster but hungrier (trade-off)
    assert dominant_algorithms([[1.0, 1.0], [1.0, 2.0]], [[5.0, 2.0], [5.0, 2.0]]) == [1, None]


@pytest.mark.parametrize("times, workspaces, bound, constraint, match", [
    ([[1.0]], [[1.0]], math.nan, SUM, "NaN"),
    ([[1.0]], [[1.0]], 1.0, "mean", "unknown workspace constraint"),
    ([[1.0]], [], 1.0, SUM, "1 layers of times but 0"),
    ([[1.0, 2.0]], [[1.0]], 1.0, SUM, "2 algorithm times but 1"),
    ([[]], [[]], 1.0, SUM, "at least one"),
    ([[-1.0]], [[1.0]], 1.0, SUM, "finite numbers ≥ 0"),
    ([[1.0]], [[math.inf]], 1.0, MAX, "finite numbers ≥ 0"),
])
def test_meaningless_input_is_refused(times, workspaces, bound, constraint, match):
    with pytest.raises(DlschedError, match=match):
        choose_algorithms(times, workspaces, bound, constraint)
