"""The compute cut at its waits (analyses/compute_segments.py), against a worker whose every op time is known.

A worker is played out exactly: a chain of ops, each needing its own parameter, run in order at a known speed
(a different one between waits and after the last wait); it waits whenever the next op's parameter has not
arrived, and its record holds only what the hooks record (arrivals, waits, compute start and end). The cut
must find the very pieces the worker ran, and the speeds it ran them at.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.compute_segments import segments, slowdowns
from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.timeline import IterationRecord


def chain(n: int) -> Graph:
    g = Graph("chain")
    for i in range(n):
        g.add_op(f"w{i}", RECV)
        g.add_op(f"op{i}", COMPUTE)
        g.add_edge(f"w{i}", f"op{i}")
        if i:
            g.add_edge(f"op{i - 1}", f"op{i}")
    return g


def play(times, cuts, waits, early, between: float, after: float):
    """Run the chain with waits before the ops in ``cuts`` (ascending, each ≥ 1), ``waits[k]`` seconds long;
    each other parameter arrives ``early[i]`` of the way from 0 to its op's start. Ops before the last wait
    run at ``between``× their time, the rest at ``after``×. ``(record, the true pieces as (first, stop))``."""
    n = len(times)
    last = cuts[-1] if cuts else 0
    t, stalls, arrivals = 0.0, [], [0.0] * n
    for i in range(n):
        if i in cuts:
            k = cuts.index(i)
            stalls.append([t, t + waits[k]])
            t += waits[k]
            arrivals[i] = t
        else:
            arrivals[i] = early[i] * t
        t += times[i] * (after if i >= last else between)
    rec = IterationRecord(0, 0, 0.0, 0.0, t + 0.01, arrivals={f"w{i}": x for i, x in enumerate(arrivals)},
                          compute_end=t, stalls=stalls)
    firsts = [0, *cuts]
    return rec, list(zip(firsts, firsts[1:] + [n]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.001, 0.1), min_size=1, max_size=12), st.data(),
       st.floats(1.0, 2.0), st.floats(1.0, 2.0))
def test_the_cut_finds_the_pieces_the_worker_ran_and_their_speeds(times, data, between, after):
    n = len(times)
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    waits = data.draw(st.lists(st.floats(0.001, 0.3), min_size=len(cuts), max_size=len(cuts)))
    early = data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))
    rec, pieces = play(times, cuts, waits, early, between, after)
    g = chain(n)
    tm = {f"op{i}": t for i, t in enumerate(times)}
    segs = segments(g, tm, rec)
    assert [(s.first, s.stop) for s in segs] == pieces
    assert [s.last for s in segs] == [False] * (len(pieces) - 1) + [True]
    # every op in exactly one piece, and the walls add up to the busy time
    assert sum(s.work for s in segs) == pytest.approx(sum(times))
    assert sum(s.wall for s in segs) == pytest.approx(rec.compute_end - rec.compute_start - sum(b - a for a, b in
                                                                                                rec.stalls))
    sd = slowdowns(g, tm, [rec])
    assert sd["after_last_wait"] == pytest.approx(after)
    if len(pieces) > 1:
        assert sd["between_waits"] == pytest.approx(between)
    else:
        assert sd["between_waits"] is None and sd["pieces_between"] == 0


def test_a_wait_before_compute_began_is_not_a_cut():
    g = chain(2)
    rec = IterationRecord(0, 0, 0.0, 0.5, 2.0, arrivals={"w0": 0.5, "w1": 0.2}, compute_end=0.8,
                          stalls=[[0.1, 0.5]])
    segs = segments(g, {"op0": 0.1, "op1": 0.2}, rec)
    assert [(s.first, s.stop, s.last) for s in segs] == [(0, 2, True)]
    assert segs[0].wall == pytest.approx(0.3)
