"""The cluster's compute calibration (``dlsched.analyses.calibration``): property-based over random records."""
import os
import statistics

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from dlsched.analyses.calibration import MAX_OVERLAP, MIN_SPREAD, calibrate_compute, compute_split
from dlsched.timeline import IterationRecord, compute_spans

positive = st.floats(0.01, 10.0, allow_nan=False)
split = st.tuples(st.floats(0.0, 5.0), st.floats(0.001, 5.0))


def synthetic(level, overlap, profile, shares, speeds):
    """Records of the calibration's model: share ``x`` of the step beside transfers, at speed ``n``."""
    return [(n * level * overlap * x * profile, n * level * (1 - x) * profile) for x, n in zip(shares, speeds)]


@settings(max_examples=200, deadline=None)
@given(level=st.floats(0.3, 3.0), overlap=st.floats(1.0, MAX_OVERLAP), profile=positive,
       shares=st.lists(st.floats(0.0, 0.9), min_size=4, max_size=40))
def test_noise_free_records_give_back_level_and_overlap(level, overlap, profile, shares):
    records = synthetic(level, overlap, profile, shares, [1.0] * len(shares))
    assume(statistics.pstdev(b for b, _ in records) >= 1.01 * MIN_SPREAD * profile)  # enough to fit on
    c = calibrate_compute(records, profile)
    assert c.identified
    assert c.overlap == pytest.approx(overlap, rel=2e-3)
    assert c.level == pytest.approx(level, rel=2e-3)
    assert all(f == pytest.approx(1.0, rel=2e-3) for f in c.factors)


@settings(max_examples=200, deadline=None)
@given(splits=st.lists(split, min_size=1, max_size=60), profile=positive, data=st.data())
def test_bounds_factors_and_order_do_not_matter(splits, profile, data):
    c = calibrate_compute(splits, profile)
    assert 1.0 <= c.overlap <= MAX_OVERLAP + 1e-9
    assert len(c.factors) == c.records == len(splits)
    assert statistics.median(c.factors) == pytest.approx(1.0)
    assert c.level > 0
    shuffled = data.draw(st.permutations(splits))
    again = calibrate_compute(shuffled, profile)
    assert (again.overlap, again.identified) == (c.overlap, c.identified)
    assert again.level == pytest.approx(c.level)
    if not c.identified:
        assert c.overlap == 1.0
        assert c.level == pytest.approx(statistics.median(a + b for b, a in splits) / profile)


def test_unordered_iterations_alone_fit_nothing():
    """Records that computed beside transfers by under MIN_SPREAD of the step: the slow-down stays 1."""
    c = calibrate_compute([(0.0, 1.0), (0.02, 1.05), (0.01, 0.95), (0.0, 1.0)], profile=1.0)
    assert (c.identified, c.overlap) == (False, 1.0)
    assert c.level == pytest.approx(1.0, abs=0.03)


@settings(max_examples=200, deadline=None)
@given(start=st.floats(0.0, 1.0), cs=st.floats(0.0, 1.0), length=st.floats(0.01, 2.0),
       arrivals=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=6),
       stalls=st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 0.5)), max_size=4),
       sends=st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 0.5)), max_size=4))
@example(start=0.0, cs=1.0, length=0.5, arrivals=[1.0], stalls=[(1.0, 0.5)], sends=[])  # a stall over all compute
def test_split_cuts_busy_time_in_two(start, cs, length, arrivals, stalls, sends):
    r = IterationRecord(0, 0, start, start + cs, start + cs + length + 1.0,
                        arrivals={f"p{i}": start + t for i, t in enumerate(arrivals)},
                        compute_end=start + cs + length, stalls=[[a, a + d] for a, d in stalls],
                        grad_sends={f"p{i}": [a, a + d] for i, (a, d) in enumerate(sends)})
    beside, quiet = compute_split(r)
    busy = sum(b - a for a, b in compute_spans(r))
    assert beside >= -1e-12 and quiet >= -1e-12
    assert beside + quiet == pytest.approx(busy, abs=1e-9)
    if not sends and max(arrivals) <= cs:  # every parameter in before compute starts: nothing beside
        assert beside == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(start=st.floats(0.0, 1.0), cs=st.floats(0.0, 1.0), length=st.floats(0.01, 2.0),
       arrivals=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=6),
       stalls=st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 0.5)), max_size=4),
       other=st.tuples(st.floats(0.0, 2.0), st.floats(0.01, 2.0)), alone=st.floats(0.3, 1.0))
@example(start=0.0, cs=1.0, length=0.5, arrivals=[1.0], stalls=[(1.0, 0.5)], other=(0.0, 1.0), alone=0.5)
def test_crowded_split_counts_each_second_at_the_pace_of_all_computing(start, cs, length, arrivals, stalls, other,
                                                                        alone):
    """Seconds with this worker computing alone count 1/``alone`` times, those beside the other worker once: the
    two parts still add up so, and with every factor 1 the split is the plain one."""
    r = IterationRecord(0, 0, start, start + cs, start + cs + length + 1.0,
                        arrivals={f"p{i}": start + t for i, t in enumerate(arrivals)},
                        compute_end=start + cs + length, stalls=[[a, a + d] for a, d in stalls])
    o = IterationRecord(0, 1, start, start + other[0], start + other[0] + other[1] + 1.0,
                        arrivals={"p0": start}, compute_end=start + other[0] + other[1])
    assert compute_split(r, [r, o], [1.0, 1.0]) == pytest.approx(compute_split(r), abs=1e-12)
    both = sum(max(0.0, min(b, y) - max(a, x)) for a, b in compute_spans(r) for x, y in compute_spans(o))
    busy = sum(b - a for a, b in compute_spans(r))
    assert sum(compute_split(r, [r, o], [alone, 1.0])) == pytest.approx(both + (busy - both) / alone, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(workers=st.integers(1, 8), cores=st.integers(1, 16), background=st.floats(0.0, 8.0), threads=st.integers(1, 4))
def test_crowd_factors_are_one_with_all_computing_and_grow_with_the_crowd(workers, cores, background, threads):
    from dlsched.analyses.calibration import crowd_factors
    c = crowd_factors(workers, cores, background, threads)
    assert len(c) == workers and c[-1] == 1.0
    assert all(0.0 < x <= y <= 1.0 for x, y in zip(c, c[1:]))
    if workers * threads + background <= cores:  # room for every thread: nobody waits for a core
        assert c == [1.0] * workers


def test_busy_cores_sees_a_busy_loop():
    """A real spinning process beside the measurement reads as most of a core (more on a loaded machine)."""
    import subprocess
    import sys

    from dlsched.machine import busy_cores
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time
        time.sleep(0.3)
        assert 0.6 <= busy_cores(0.5) <= (os.cpu_count() or 1) + 0.01
    finally:
        spin.kill()
        spin.wait()


def _overlapped(q: float, a: float, f: float, g: float) -> tuple[float, float]:
    """Backward (``q`` alone) and an all-reduce (``a`` alone) started together, each slowed by the other while
    both run: when each ends."""
    if q * f <= a * g:  # backward ends first
        t = q * f
        return t, t + a - t / g
    e = a * g
    return e + q - e / f, e


@settings(max_examples=200, deadline=None)
@given(st.floats(0.05, 5.0), st.floats(0.05, 5.0), st.floats(1.0, 4.0), st.floats(1.0, 4.0))
def test_fit_contention_recovers_both_slowdowns(q, a, f, g):
    from dlsched.analyses.calibration import fit_contention
    t, e = _overlapped(q, a, f, g)
    got_f, got_g = fit_contention([q], [t], [e], a)
    assert (got_f, got_g) == pytest.approx((f, g), rel=1e-6)


def test_fit_contention_without_records_or_contention_is_one():
    from dlsched.analyses.calibration import fit_contention
    assert fit_contention([], [], [], 1.0) == (1.0, 1.0)
    assert fit_contention([1.0, 1.0], [0.9, 1.0], [1.5, 1.4], 1.5) == (1.0, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0)), min_size=1, max_size=4),
       st.floats(0.05, 5.0), st.floats(0.05, 5.0), st.floats(1.0, 4.0), st.floats(1.0, 4.0))
def test_cluster_contention_recovers_both_slowdowns_on_the_envelope(ranks, q, a, f, g):
    """Ranks end forward, backward and the all-reduce at different times; the envelope (the last forward, the
    last backward, the last rank to have the all-reduce) ran backward q alone and the all-reduce a alone, each
    slowed by the other: both slow-downs come back, whatever the other ranks did inside the envelope."""
    import numpy as np

    from dlsched.analyses.calibration import cluster_contention
    t, e = _overlapped(q, a, f, g)
    fwd = np.array([[1.0 + x for x, _, _ in ranks]])
    last = fwd.max()
    lag_b = np.array([[y for _, y, _ in ranks]])
    lag_e = np.array([[z for _, _, z in ranks]])
    lag_b[0, 0] = lag_e[0, -1] = 0.0  # one rank ends backward last, one has the all-reduce last
    whole = last + t - lag_b * t
    comm = last + e - lag_e * e - fwd
    quiet_fwd = fwd.copy()
    quiet_whole = last + q - lag_b * q
    assert cluster_contention(quiet_fwd, quiet_whole, fwd, whole, comm, a) == pytest.approx((f, g), rel=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.05, 5.0), st.floats(0.05, 5.0), st.floats(1.0, 4.0), st.floats(1.0, 4.0), st.floats(0.0, 2.0))
def test_cluster_contention_of_one_rank_is_fit_contention(q, a, f, g, forward):
    import numpy as np

    from dlsched.analyses.calibration import cluster_contention, fit_contention
    t, e = _overlapped(q, a, f, g)
    got = cluster_contention([[forward]], [[forward + q]], [[forward]], [[forward + t]], [[e]], a)
    assert got == pytest.approx(fit_contention([q], [t], [e], a), rel=1e-9)
    assert cluster_contention(np.ones((0, 2)), np.ones((0, 2)), np.ones((0, 2)), np.ones((0, 2)),
                              np.ones((0, 2)), a) == (1.0, 1.0)


rounds_of_ranks = st.integers(1, 6).flatmap(lambda r: st.lists(
    st.lists(st.tuples(st.floats(0.01, 3.0), st.floats(0.0, 3.0)), min_size=r, max_size=r), min_size=1, max_size=8))


@settings(max_examples=100, deadline=None)
@given(rounds_of_ranks)
def test_cluster_phases_keep_the_slowest_rank_s_compute_and_end_forward_at_the_last(rounds):
    """The split moves no compute: forward + backward is the level the calibration always had (the median of
    each round's slowest rank), and forward is at least any one rank's median forward."""
    import numpy as np

    from dlsched.analyses.calibration import cluster_phases
    forward = np.array([[f for f, _ in ranks] for ranks in rounds])
    whole = forward + np.array([[b for _, b in ranks] for ranks in rounds])
    fwd, bwd = cluster_phases(forward, whole)
    assert bwd >= 0
    assert fwd + bwd == pytest.approx(float(np.median(whole.max(axis=1))), rel=1e-9, abs=1e-12)
    assert fwd >= float(np.median(forward, axis=0).max()) - 1e-12
