"""Unions of time intervals, exact: sort and sweep in numpy.

Trace analyses ask "how long was the GPU busy with compute", "how much of the
communication overlapped it", "how much of the step was idle". Each is the
length of a union, an intersection or a difference of interval sets, and each
follows from union lengths alone::

    |A ∩ B| = |A| + |B| − |A ∪ B|        |A \\ B| = |A ∪ B| − |B|

so one exact operation suffices: :func:`merge` turns any intervals into their
sorted, disjoint union (one sort, one running maximum), and
:func:`covered` measures a merged set inside many windows at once through its
prefix sums (two binary searches per window). Nothing is rounded to a grid, so
the figures are exact whatever the clock's resolution.

A merged set is a pair of float arrays ``(starts, ends)``, sorted by start,
disjoint; intervals that touch are merged.
"""
from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]


def merge(starts, ends) -> Intervals:
    """The union of intervals ``[starts[i], ends[i]]`` as a sorted, disjoint set.

    Sorted by start, an interval opens a new group when it starts after every
    earlier interval has ended (the running maximum of their ends); a group is
    ``[its first start, its largest end]``. Holistic Trace Analysis merges
    kernels with the same rule (``merge_kernel_intervals``). Intervals are
    expected to have ``end >= start``.

    Parameters
    ----------
    starts, ends : array-like of float

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The starts and ends of the union's intervals.

    Examples
    --------
    >>> s, e = merge([5, 0, 2, 9], [7, 3, 4, 9.5])
    >>> s.tolist(), e.tolist(), length((s, e))
    ([0.0, 5.0, 9.0], [4.0, 7.0, 9.5], 6.5)
    """
    s = np.asarray(starts, dtype=float).ravel()
    e = np.asarray(ends, dtype=float).ravel()
    if s.shape != e.shape:
        raise ValueError(f"{s.size} starts and {e.size} ends")
    if s.size == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def union(*sets: Intervals) -> Intervals:
    """The union of merged sets (or of any intervals), merged.

    >>> union((np.array([0.0]), np.array([2.0])), (np.array([1.0, 5.0]), np.array([3.0, 6.0])))[1].tolist()
    [3.0, 6.0]
    """
    if not sets:
        return np.empty(0), np.empty(0)
    return merge(np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets]))


def length(merged: Intervals) -> float:
    """Total length of a merged set."""
    s, e = merged
    return float((e - s).sum())


def covered(merged: Intervals, lo, hi) -> np.ndarray:
    """Length of a merged set inside each window ``[lo[i], hi[i]]``, exactly.

    Parameters
    ----------
    merged : (numpy.ndarray, numpy.ndarray)
        From :func:`merge`: sorted, disjoint.
    lo, hi : array-like of float
        The windows (``hi >= lo``).

    Returns
    -------
    numpy.ndarray
        One length per window.

    Examples
    --------
    >>> m = merge([0, 10], [4, 20])
    >>> covered(m, [2, 0, 5, 15], [12, 30, 9, 16]).tolist()
    [4.0, 14.0, 0.0, 1.0]
    """
    s, e = merged
    lo = np.atleast_1d(np.asarray(lo, dtype=float))
    hi = np.atleast_1d(np.asarray(hi, dtype=float))
    if s.size == 0:
        return np.zeros(lo.shape)
    prefix = np.concatenate(([0.0], np.cumsum(e - s)))
    return _upto(s, e, prefix, hi) - _upto(s, e, prefix, lo)


def _upto(s: np.ndarray, e: np.ndarray, prefix: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the merged set before each time ``t``."""
    k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
    whole = prefix[np.maximum(k - 1, 0)]      # those before the one t may fall in
    i = np.maximum(k - 1, 0)
    part = np.clip(t - s[i], 0.0, e[i] - s[i])
    return np.where(k > 0, whole + part, 0.0)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The part of merged set ``a`` outside merged set ``b``, merged.

    Every boundary of either set cuts the line into segments; a segment is kept
    when its midpoint lies in ``a`` and not in ``b``.

    >>> s, e = subtract(merge([0, 10], [8, 12]), merge([2, 11], [3, 20]))
    >>> s.tolist(), e.tolist()
    ([0.0, 3.0, 10.0], [2.0, 8.0, 11.0])
    """
    if a[0].size == 0 or b[0].size == 0:
        return a
    cuts = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    lo, hi = cuts[:-1], cuts[1:]
    mid = (lo + hi) / 2
    keep = inside(a, mid) & ~inside(b, mid)
    return merge(lo[keep], hi[keep])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The part of merged set ``a`` inside merged set ``b``: ``a − (a − b)``.

    >>> s, e = intersect(merge([0, 5], [3, 9]), merge([2], [6]))
    >>> s.tolist(), e.tolist()
    ([2.0, 5.0], [3.0, 6.0])
    """
    return subtract(a, subtract(a, b))


def inside(m: Intervals, t) -> np.ndarray:
    """Whether each time ``t`` lies in merged set ``m`` (``start <= t < end``).

    >>> inside(merge([0, 5], [2, 6]), [0.0, 2.0, 5.5]).tolist()
    [True, False, True]
    >>> inside(merge([], []), [1.0]).tolist()
    [False]
    """
    s, e = m
    t = np.asarray(t, dtype=float)
    if s.size == 0:
        return np.zeros(t.shape, dtype=bool)
    k = np.searchsorted(s, t, side="right") - 1
    return (k >= 0) & (t < e[np.maximum(k, 0)])
