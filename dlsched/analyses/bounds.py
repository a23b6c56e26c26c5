"""Makespan bounds, best-case speedup and scheduling efficiency (TicTac §3.2, DESIGN §4.1).

The upper bound runs every op one after another; the lower bound keeps the
busiest resource always busy. Both ignore dependencies, so neither need be
achievable; every real schedule lies between them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from dlsched.dag import Graph

from .properties import check_times


@dataclass
class Bounds:
    """Makespan bounds of one graph under one time oracle.

    Attributes
    ----------
    upper : float
        Seconds with every op serialised (U).
    lower : float
        Seconds of the busiest resource (L).
    speedup : float
        The most any schedule can gain over the worst: (U − L) / L (S).
    loads : dict
        Resource → seconds of work on it.
    ops : dict
        Resource → number of ops on it.
    """

    upper: float
    lower: float
    speedup: float
    loads: dict = field(default_factory=dict)
    ops: dict = field(default_factory=dict)

    def schedule_efficiency(self, makespan: float) -> float:
        """Scheduling efficiency of a makespan under these bounds (see :func:`schedule_efficiency`)."""
        return schedule_efficiency(self.upper, self.lower, makespan)

    def frame(self):
        """Per-resource loads as a DataFrame: ``resource``, ``ops``, ``load`` (s), ``share`` of the upper bound."""
        import pandas as pd

        rows = [{"resource": r, "ops": self.ops.get(r, 0), "load": load,
                 "share": load / self.upper if self.upper > 0 else 0.0} for r, load in self.loads.items()]
        return pd.DataFrame(rows, columns=["resource", "ops", "load", "share"])


def bounds(graph: Graph, times: Mapping[str, float]) -> Bounds:
    """Upper and lower makespan bounds and the best-case speedup (TicTac §3.2, Eqs. 1, 2, 4).

    ``U = Σ_op Time(op)``; ``L = max_resource Σ_{op on resource} Time(op)``;
    ``S = (U − L) / L``, and ``S = 0`` when ``U = L`` (including an empty or
    all-zero graph). Sums use :func:`math.fsum`, so they do not depend on op
    order.

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → seconds for every op.

    Returns
    -------
    Bounds

    Raises
    ------
    OracleError
        ``times`` misses an op or holds a negative/non-finite time.

    Examples
    --------
    Figure 1 of the paper (unit times, both recvs on one channel):

    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("fig1")
    >>> for n in ("recv1", "recv2"): _ = g.add_op(n, RECV)
    >>> for n in ("op1", "op2"): _ = g.add_op(n, COMPUTE)
    >>> g.add_edge("recv1", "op1"); g.add_edge("recv1", "op2"); g.add_edge("recv2", "op2")
    >>> b = bounds(g, dict.fromkeys(["recv1", "recv2", "op1", "op2"], 1.0))
    >>> b.upper, b.lower, b.speedup
    (4.0, 2.0, 1.0)
    """
    check_times(graph, times)
    per: dict[str, list[float]] = {r: [] for r in graph.resources()}
    for op in graph.ops():
        per.setdefault(op.resource, []).append(float(times[op.name]))
    loads = {r: math.fsum(v) for r, v in per.items()}
    U = math.fsum(float(times[op.name]) for op in graph.ops())
    L = max(loads.values(), default=0.0)
    S = (U - L) / L if U > L and L > 0 else 0.0
    return Bounds(U, L, S, loads, {r: len(v) for r, v in per.items()})


def schedule_efficiency(upper: float, lower: float, makespan: float) -> float:
    """Scheduling efficiency ``E = (U − m) / (U − L)`` of a makespan (TicTac §3.2, Eq. 3).

    1 is a perfect schedule, 0 a fully serial one; 1 when ``U = L`` (no
    schedule can do better or worse). Not clipped: a measured makespan above
    ``U`` (overheads outside the model) gives a negative value.

    Parameters
    ----------
    upper, lower : float
        The bounds of :func:`bounds`.
    makespan : float
        Seconds of one iteration (measured, from a trace, or simulated).

    Returns
    -------
    float

    See Also
    --------
    rate_makespan : the same ``E``, but ``None`` (and a model error) for a
        makespan outside ``[L, U]``.
    Bounds.schedule_efficiency : ``E`` of a makespan under a :class:`Bounds`.
    dlsched.planning.cluster.scaling_efficiency : Lemma 3.1's ``α``, the
        efficiency of ``G`` devices over one; unrelated to transfer order.

    Examples
    --------
    >>> schedule_efficiency(4.0, 2.0, 3.0)
    0.5
    >>> schedule_efficiency(2.0, 2.0, 2.0)
    1.0
    """
    U, L, m = float(upper), float(lower), float(makespan)
    if U <= L:
        return 1.0
    return (U - m) / (U - L)


@dataclass
class Rating:
    """A makespan rated against the bounds: the efficiency, or the model error when it lies outside them.

    Attributes
    ----------
    efficiency : float or None
        ``E`` in [0, 1]; ``None`` when the makespan lies outside ``[L, U]``.
    model_error : float
        Seconds by which the makespan lies outside ``[L, U]``: positive above
        ``U`` (time the oracle does not account for), negative below ``L``
        (faster than the oracle allows); 0 inside.
    """

    efficiency: float | None
    model_error: float
    #: The bound the makespan was measured against (U above, L below); 0 inside.
    bound: float = field(default=0.0, repr=False, compare=False)

    @property
    def relative_error(self) -> float:
        """``model_error`` as a share of the bound it exceeds (``U`` above, ``L`` below); 0 inside.

        Examples
        --------
        >>> rate_makespan(4.0, 2.0, 5.0).relative_error
        0.25
        >>> rate_makespan(4.0, 2.0, 1.0).relative_error
        -0.5
        """
        return self.model_error / self.bound if self.model_error and self.bound else 0.0


def rate_makespan(upper: float, lower: float, makespan: float) -> Rating:
    """Rate a measured or simulated makespan: :func:`schedule_efficiency` inside ``[L, U]``, a model error outside.

    A makespan outside the bounds means the oracle and the run do not describe
    the same thing (another device, batch or overheads), so an efficiency
    computed from it would be meaningless (negative, or above 1).

    See Also
    --------
    schedule_efficiency : the formula alone, unclipped.

    Examples
    --------
    >>> rate_makespan(4.0, 2.0, 3.0)
    Rating(efficiency=0.5, model_error=0.0)
    >>> rate_makespan(4.0, 2.0, 10.0)
    Rating(efficiency=None, model_error=6.0)
    """
    U, L, m = float(upper), float(lower), float(makespan)
    if m > U:
        return Rating(None, m - U, U)
    if m < L:
        return Rating(None, m - L, L)
    return Rating(schedule_efficiency(U, L, m), 0.0)


def trace_makespan(path: str | Path) -> float:
    """Makespan in seconds of a measured Chrome trace (``.json`` or ``.json.gz``).

    ``max(ts + dur) − min(ts)`` over the complete (``"ph": "X"``) events; trace
    times are microseconds. Accepts a bare event list or an object with
    ``traceEvents`` (PyTorch/Kineto, TF timelines, dlsched's own traces).
    The file is read by :func:`dlsched.profiling.trace_import.read_trace_events`,
    the same reader ``profile --from-trace`` uses.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    float

    Raises
    ------
    TraceError
        (a :class:`DlschedError`) Missing or unreadable file, not a Chrome
        trace, no complete events, or an event with a negative duration.

    Examples
    --------
    >>> import json, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.json")
    >>> _ = open(p, "w").write(json.dumps({"traceEvents": [
    ...     {"ph": "X", "ts": 100, "dur": 50}, {"ph": "X", "ts": 120, "dur": 1000}]}))
    >>> round(trace_makespan(p), 9)
    0.00102
    """
    # Imported here: the trace reader's module pulls in pandas, which bounds alone does not need.
    from dlsched.profiling.trace_import import read_trace_events

    from dlsched.formats.kineto_trace import TraceError

    events = read_trace_events(path)
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) * 1e-6
    if not math.isfinite(span):
        raise TraceError(f"{path}: the trace's span overflows (its timestamps or durations reach "
                         f"{max(abs(e['ts']) + e['dur'] for e in events):.3g} us, past what a float holds as a "
                         "difference); the trace is corrupt")
    return span
