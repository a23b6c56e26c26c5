"""One algorithm per layer under a workspace bound (paper ``003_*`` §3.1.3, Eq. 6).

Each layer (a convolution, say) can run one of several algorithms, each with
its own time and workspace: FFT is faster than GEMM on large filters but needs
far more memory. :func:`choose_algorithms` picks one algorithm per layer so
that the total time is least while the workspace fits the memory left for it.
How the workspaces add up is the ``constraint``:

``"sum"`` (the default)
    Every layer's workspace counts, ``Σ workspace ≤ bound``: the paper's
    Eq. 6, a multiple-choice knapsack. It is the default because it is the
    paper's formulation and the safe one: a choice that fits under ``"sum"``
    fits however the framework allocates workspace, whereas a ``"max"`` choice
    runs out of memory in a framework that keeps one workspace per layer
    (Caffe's cuDNN layers did).
``"max"``
    Only the largest workspace counts, ``max workspace ≤ bound``: frameworks
    that run layers one at a time and reuse one workspace buffer (MXNet's
    shared temp space, TensorFlow's and PyTorch's per-call scratch allocation)
    never hold two at once. Each layer then takes its fastest algorithm whose
    workspace alone fits, which is exact.

The sum problem is NP-hard in general and workspaces are real numbers, so a
dynamic program over discretised memory would not be exact. This one keeps,
layer by layer, the Pareto frontier of (workspace so far, time so far) over
the partial choices: a partial choice that uses at least as much workspace and
time as another can never finish better. Two bounds prune it: a partial choice
whose workspace plus the remaining layers' smallest workspaces exceeds the
bound cannot be completed, and one whose time plus the remaining layers'
fastest times exceeds a greedy feasible choice's time cannot win. The result
is the optimum of Eq. 6 exactly (equal, float for float, to brute force); the
frontier holds at most as many points as there are distinct reachable
workspace sums, and in practice far fewer.

Examples
--------
Two layers, each with a slow, lean algorithm and a fast, hungry one:

>>> times = [[4.0, 2.0], [3.0, 1.5]]
>>> workspaces = [[1.0, 8.0], [1.0, 5.0]]
>>> choose_algorithms(times, workspaces, bound=9.0)
AlgorithmChoice(algorithms=(1, 0), time=5.0, workspace=9.0)
>>> choose_algorithms(times, workspaces, bound=7.0)
AlgorithmChoice(algorithms=(0, 1), time=5.5, workspace=6.0)
>>> choose_algorithms(times, workspaces, bound=9.0, constraint="max")
AlgorithmChoice(algorithms=(1, 1), time=3.5, workspace=8.0)
>>> choose_algorithms(times, workspaces, bound=1.5) is None
True
>>> dominant_algorithms(times, workspaces)
[None, None]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dlsched.errors import DlschedError

SUM = "sum"
MAX = "max"
CONSTRAINTS = (SUM, MAX)

# Look-ahead pruning compares sums added in another order than the final one;
# this relative slack keeps it from cutting a choice that rounding would let through.
_SLACK = 1e-9


@dataclass(frozen=True)
class AlgorithmChoice:
    """One algorithm per layer, with its total time and the workspace it needs.

    Attributes
    ----------
    algorithms : tuple of int
        The chosen algorithm's index in each layer's list, in layer order.
    time : float
        Σ of the chosen algorithms' times.
    workspace : float
        The workspace the choice needs under its constraint: the sum of the
        chosen workspaces (``"sum"``) or the largest of them (``"max"``).
    """

    algorithms: tuple[int, ...]
    time: float
    workspace: float


def check_constraint(constraint: str) -> str:
    """``constraint`` itself when it is ``"sum"`` or ``"max"``.

    Raises
    ------
    DlschedError
        For any other value.
    """
    if constraint not in CONSTRAINTS:
        raise DlschedError(f"unknown workspace constraint {constraint!r}; expected 'sum' (every layer's workspace "
                           "counts, the paper's Eq. 6) or 'max' (one workspace buffer reused by every layer)")
    return constraint


def _layers(times: Sequence[Sequence[float]], workspaces: Sequence[Sequence[float]]) -> list[tuple]:
    """Per layer, ``(times, workspaces)`` as float arrays; refuses mismatched, empty or meaningless entries."""
    if len(times) != len(workspaces):
        raise DlschedError(f"{len(times)} layers of times but {len(workspaces)} of workspaces")
    out = []
    for k, (t, w) in enumerate(zip(times, workspaces)):
        t, w = np.asarray(t, dtype=float).ravel(), np.asarray(w, dtype=float).ravel()
        if len(t) != len(w) or len(t) == 0:
            raise DlschedError(f"layer {k}: {len(t)} algorithm times but {len(w)} workspaces (at least one each)")
        if not (np.isfinite(t).all() and np.isfinite(w).all() and (t >= 0).all() and (w >= 0).all()):
            raise DlschedError(f"layer {k}: times and workspaces must be finite numbers ≥ 0, "
                               f"got times {t.tolist()} and workspaces {w.tolist()}")
        out.append((t, w))
    return out


def dominant_algorithms(times: Sequence[Sequence[float]],
                        workspaces: Sequence[Sequence[float]]) -> list[int | None]:
    """Per layer, an algorithm at least as fast and as lean as every other; ``None`` where none is.

    Where every layer has one, there is no speed/memory trade-off: the memory
    bound only decides whether the model fits, never which algorithm runs
    (oneDNN's direct convolution on CPUs is usually such a case).

    Examples
    --------
    >>> dominant_algorithms([[1.0, 2.0], [1.0, 2.0]], [[0.0, 5.0], [5.0, 0.0]])
    [0, None]
    """
    out = []
    for t, w in _layers(times, workspaces):
        best = int(np.lexsort((w, t))[0])  # fastest, leanest among the fastest
        out.append(best if w[best] <= w.min() else None)
    return out


def choose_algorithms(times: Sequence[Sequence[float]], workspaces: Sequence[Sequence[float]], bound: float,
                      constraint: str = SUM) -> AlgorithmChoice | None:
    """The fastest choice of one algorithm per layer whose workspace fits ``bound`` (Eq. 6).

    Parameters
    ----------
    times, workspaces : sequence of sequences of float
        ``times[k][l]`` and ``workspaces[k][l]``: seconds and bytes of layer
        ``k`` run with algorithm ``l``. Layers may offer different numbers of
        algorithms.
    bound : float
        The workspace available (bytes); ``inf`` for no bound. A negative
        bound fits nothing.
    constraint : {"sum", "max"}
        How workspaces add up (module docstring): ``"sum"``, the paper's Eq. 6
        and the safe default, or ``"max"``, one buffer reused by every layer.

    Returns
    -------
    AlgorithmChoice or None
        The least total time; among equally fast choices, the least workspace.
        ``None`` when no choice fits.

    Raises
    ------
    DlschedError
        A NaN bound, an unknown constraint, or times and workspaces that do not
        match or are negative or not finite.
    """
    check_constraint(constraint)
    if math.isnan(bound):
        raise DlschedError("the workspace bound is NaN")
    layers = _layers(times, workspaces)
    if bound < 0:
        return None
    if constraint == MAX:
        return _per_layer_fastest(layers, bound)
    return _eq6(layers, bound)


def _sum(values) -> float:
    """Σ in layer order: the one way every total here is added up, so equal choices give equal floats."""
    return sum(float(v) for v in values)


def _fastest_under(layers: list[tuple], cap: float) -> list[int] | None:
    """Per layer, the fastest algorithm with workspace ≤ ``cap`` (leanest on ties); ``None`` if a layer has none."""
    picks = []
    for t, w in layers:
        fits = np.flatnonzero(w <= cap)
        if not len(fits):
            return None
        picks.append(int(fits[np.lexsort((w[fits], t[fits]))[0]]))
    return picks


def _per_layer_fastest(layers: list[tuple], bound: float) -> AlgorithmChoice | None:
    """Under the max constraint the layers are independent: each takes its fastest algorithm that fits.

    Among choices equally fast in total (a float sum can tie where the parts
    differ), the one with the smallest largest workspace: the least cap with
    the same total, by bisection, since the total only falls as the cap grows.
    """
    picks = _fastest_under(layers, bound)
    if picks is None:
        return None
    fastest = _sum(t[a] for (t, _), a in zip(layers, picks))
    caps = np.unique(np.concatenate([w for _, w in layers] or [np.zeros(1)]))
    lo, hi = 0, int(np.searchsorted(caps, max((w[a] for (_, w), a in zip(layers, picks)), default=0.0)))
    while lo < hi:  # invariant: caps[hi] keeps the fastest total
        mid = (lo + hi) // 2
        at = _fastest_under(layers, caps[mid])
        if at is not None and _sum(t[a] for (t, _), a in zip(layers, at)) == fastest:
            hi = mid
        else:
            lo = mid + 1
    picks = _fastest_under(layers, caps[hi])
    return AlgorithmChoice(tuple(picks), fastest, max((float(w[a]) for (_, w), a in zip(layers, picks)), default=0.0))


def _greedy_time(layers: list[tuple], bound: float) -> float | None:
    """The time of a feasible sum-constrained choice (an upper bound for pruning); ``None`` if none fits.

    Starts from every layer's leanest algorithm and repeatedly takes the
    upgrade that saves the most time per extra byte while the sum still fits.
    """
    lean = [int(np.lexsort((t, w))[0]) for t, w in layers]
    if _sum(w[a] for (_, w), a in zip(layers, lean)) > bound:
        return None  # the leanest choice's sum is the least any choice reaches, float for float
    picks, used = list(lean), _sum(w[a] for (_, w), a in zip(layers, lean))
    while True:
        best = None  # (saving per byte, layer, algorithm)
        for k, (t, w) in enumerate(layers):
            saving, extra = t[picks[k]] - t, w - w[picks[k]]
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                rate = np.where(extra > 0, saving / extra, math.inf)
            rate[~((saving > 0) & (used + extra <= bound))] = -math.inf
            a = int(np.argmax(rate))
            if rate[a] > -math.inf and (best is None or rate[a] > best[0]):
                best = (rate[a], k, a)
        if best is None:
            break
        picks[best[1]] = best[2]
        used = _sum(w[a] for (_, w), a in zip(layers, picks))
    if used > bound:  # the running check rounds differently from the layer-order sum
        picks = lean
    return _sum(t[a] for (t, _), a in zip(layers, picks))


def _eq6(layers: list[tuple], M_bound: float) -> AlgorithmChoice | None:
    """Eq. 6: ``min Σ_k Σ_l x_kl·T_kl``  s.t.  ``Σ_k Σ_l x_kl·M_kl ≤ M_bound``, ``Σ_l x_kl = 1``.

    Exact, by the Pareto frontier of (M, T) over the choices for layers
    ``0..k``, pruned by the leanest and the fastest completion (module docstring).
    """
    q = len(layers)
    ub = _greedy_time(layers, M_bound)
    if ub is None:
        return None
    # leanest / fastest completion of layers k..q−1
    M_rest = np.append(np.cumsum([w.min() for _, w in layers][::-1])[::-1], 0.0)
    T_rest = np.append(np.cumsum([t.min() for t, _ in layers][::-1])[::-1], 0.0)
    M, T = np.zeros(1), np.zeros(1)
    back = []  # per layer: for each frontier point, index into (previous point × algorithm)
    for k, (T_k, M_k) in enumerate(layers):
        p = len(T_k)
        M_new, T_new = (M[:, None] + M_k[None, :]).ravel(), (T[:, None] + T_k[None, :]).ravel()
        keep = (M_new <= M_bound)
        keep &= M_new + M_rest[k + 1] <= M_bound + _SLACK * max(abs(M_bound), M_new.max(initial=0.0))
        keep &= T_new + T_rest[k + 1] <= ub * (1 + _SLACK) + 1e-300
        idx = np.flatnonzero(keep)
        order = idx[np.lexsort((T_new[idx], M_new[idx]))]  # by M, then T
        t_sorted = T_new[order]
        faster = t_sorted < np.minimum.accumulate(np.concatenate([[np.inf], t_sorted[:-1]]))
        order = order[faster]  # Pareto frontier: T strictly falls as M grows
        M, T = M_new[order], T_new[order]
        back.append((order, p))
    # the greedy choice survives every cut, so the frontier is never empty here
    best = int(np.argmin(T))  # T strictly falls along the frontier: the least M among the fastest
    x = [0] * q
    i = best
    for k in range(q - 1, -1, -1):
        order, p = back[k]
        i, x[k] = divmod(int(order[i]), p)
    return AlgorithmChoice(tuple(x), float(T[best]), float(M[best]))
