"""TicTac's bounds U, L and efficiency E for each measured step of a trace (DESIGN §4.1, §4.9).

A data-parallel step runs on two resources: the **compute** stream(s) and the
**collective** (communication) stream. From a rank's Kineto trace each step
gets, as TicTac rates a worker from its trace (§4.1):

- ``C`` and ``N``: the busy time of each resource, the exact union of its
  events' intervals (overlapping kernels on two compute streams count once);
- ``U = C + N`` (everything serialised), ``L = max(C, N)`` (the busier
  resource never idles);
- ``m``, the step's **device makespan**: first start to last end of the device
  work the step launched, and ``E = (U − m) / (U − L)``.

Why that ``m`` and not the ``ProfilerStep`` span: the span is the host's. On a
GPU the host runs ahead (the public ROCm DDP trace launches a step's kernels
about 30 ms before they run, two steps ahead), so the span holds other steps'
kernels and none of its own; and a host-bound step spends most of its span
with the device idle, waiting for launches, which no schedule of the two
resources explains. The device makespan still holds the device's idle gaps
between the step's own kernels (``idle``, reported beside it); where they
exceed the overlap, ``m > U`` and the step is a **model error** of that size
(:func:`~dlsched.analyses.bounds.rate_makespan`), never an ``E`` outside
[0, 1]. ``busy_efficiency`` rates ``m`` without those gaps, the overlap alone:
``overlap / min(C, N)``. The time of the span outside the device makespan is
``host_only``.

A CPU-only (gloo) trace has no device: the resources are the host threads'
compute (their ``cpu_op`` / ``user_annotation`` intervals, less the collectives
each thread ran itself) and the collective work (``gloo:*``, ``c10d::*``, ``nccl:*``,
``record_param_comms`` on any thread), and ``m`` is the ``ProfilerStep`` span,
the host's own makespan. A trace without ``ProfilerStep#N`` annotations is one
step, the whole trace (``step`` is ``None``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlsched.formats.kineto_trace import KinetoTrace
from dlsched.profiling import kineto_events as ke

from . import intervals as iv

from .bounds import Rating, rate_makespan

#: Host record functions of a collective (gloo on CPU, the c10d dispatcher, DDP's comm records): the one
#: rule of :mod:`~dlsched.profiling.kineto_events`, which the time breakdown uses too.
COLLECTIVE_HOST = ke.HOST_COLLECTIVE


# The trace analyses keep unions as sorted, disjoint ``[start, end]`` rows; the algebra is analyses/intervals.py's.

def _union(starts, ends) -> np.ndarray:
    """The union of intervals as sorted, disjoint ``[start, end]`` rows, empty intervals left out (exact).

    Examples
    --------
    >>> _union([0, 5, 1, 9], [2, 6, 3, 9]).tolist()
    [[0.0, 3.0], [5.0, 6.0]]
    """
    s = np.asarray(starts, dtype=float).ravel()
    e = np.asarray(ends, dtype=float).ravel()
    keep = e > s
    return _rows(iv.merge(s[keep], e[keep]))


def _rows(m) -> np.ndarray:
    return np.column_stack(m) if len(m[0]) else np.empty((0, 2))


def _pair(u: np.ndarray):
    return u[:, 0], u[:, 1]


def _length(u: np.ndarray) -> float:
    return iv.length(_pair(u)) if len(u) else 0.0


def _intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection of two unions (:func:`_union` output), as a union.

    Examples
    --------
    >>> _intersect(_union([0, 5], [3, 9]), _union([2], [6])).tolist()
    [[2.0, 3.0], [5.0, 6.0]]
    """
    if not len(a) or not len(b):
        return np.empty((0, 2))
    return _rows(iv.intersect(_pair(a), _pair(b)))


def _subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` minus ``b`` (both unions), as a union.

    Examples
    --------
    >>> _subtract(_union([0], [10]), _union([2, 5], [3, 6])).tolist()
    [[0.0, 2.0], [3.0, 5.0], [6.0, 10.0]]
    """
    if not len(a):
        return np.empty((0, 2))
    return _rows(iv.subtract(_pair(a), _pair(b))) if len(b) else a


@dataclass
class StepBounds:
    """One measured step of one rank, rated against TicTac's bounds. Times are seconds.

    Attributes
    ----------
    rank : int or None
    step : int or None
        ``N`` of ``ProfilerStep#N``; ``None`` for a trace without steps (the whole trace).
    resources : str
        ``device`` (compute and collective streams) or ``host`` (a CPU-only trace).
    compute, communication, overlap : float
        Busy time of each resource (unions), and of both at once.
    upper, lower : float
        ``U = compute + communication``, ``L = max(compute, communication)``.
    makespan : float
        ``m``: the device makespan of the step's own work (``host``: the step's span).
    idle : float
        Time inside ``m`` when neither resource is busy.
    step_time : float
        The ``ProfilerStep`` span (or the whole trace's span).
    host_only : float
        ``step_time − makespan`` where positive: the step's time outside its device work.
    rating : Rating
        ``E`` of ``m`` in [0, 1], or the model error (seconds, and relative) when ``m`` is outside [L, U].
    busy_efficiency : float
        ``E`` of the busy time ``m − idle``: ``overlap / min(compute, communication)`` (1 when one is 0).
    early : float
        Busy time of the step's device work before its window opened, beside the earlier steps' work
        (left out of ``compute`` and ``communication``).
    """

    rank: int | None
    step: int | None
    resources: str
    compute: float
    communication: float
    overlap: float
    upper: float
    lower: float
    makespan: float
    idle: float
    step_time: float
    host_only: float
    rating: Rating
    busy_efficiency: float
    early: float = 0.0

    @property
    def efficiency(self) -> float | None:
        return self.rating.efficiency

    @property
    def model_error(self) -> float:
        return self.rating.model_error

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("rank", "step", "resources", "compute", "communication", "overlap",
                                           "upper", "lower", "makespan", "idle", "step_time", "host_only",
                                           "busy_efficiency", "early")}
        d.update(efficiency=self.rating.efficiency, model_error=self.rating.model_error,
                 relative_model_error=self.rating.relative_error)
        return d


def step_windows(events: pd.DataFrame) -> pd.DataFrame:
    """The trace's steps (:func:`~dlsched.profiling.kineto_events.steps`), or the whole trace as one.

    Returns
    -------
    pandas.DataFrame
        ``step`` (None for the whole trace), ``ts``, ``end``, ``pid``, ``tid`` of the thread that
        annotates the step (for the whole trace: the thread with the most top-level host time).
    """
    st = ke.steps(events)
    if len(st):
        return st[["step", "ts", "end", "pid", "tid"]].astype({"step": object})
    host = ke.host_ops(events)
    if not len(host):
        host = events
    busy = host.groupby(["pid", "tid"])["dur"].sum()
    pid, tid = busy.idxmax()
    return pd.DataFrame([{"step": None, "ts": float(events["ts"].min()), "end": float(events["end"].max()),
                          "pid": pid, "tid": tid}])


def _attributed(dev: pd.DataFrame) -> pd.Series:
    """When each device event was launched; an event without a launch that ran before the first launched
    one of its stream was queued before the trace began (``-inf``); other events without a launch stay NaN."""
    at = dev["launch_ts"].copy()
    if at.notna().any():
        first = dev["ts"].where(at.notna()).groupby(dev["stream"]).transform("min").fillna(np.inf)
        at[at.isna() & (dev["ts"] < first)] = -np.inf
    else:  # a trace without runtime launches: each event counts from its own start
        at = dev["ts"].copy()
    return at


def _step_device(dev: pd.DataFrame, at: pd.Series, t0: float, t1: float) -> tuple[pd.DataFrame, float]:
    """The device events the step ``[t0, t1)`` launched, and the end of the earlier steps' device work."""
    before = dev["end"][at < t0]
    return dev[(at >= t0) & (at < t1)], (float(before.max()) if len(before) else -np.inf)


def _rate(rank, step, resources, comp: np.ndarray, comm: np.ndarray, m: float, step_time: float) -> StepBounds:
    C, N = _length(comp), _length(comm)
    both = _length(_intersect(comp, comm))
    busy = C + N - both
    U, L = (C + N) * 1e-6, max(C, N) * 1e-6
    ms = m * 1e-6
    busy_e = both / min(C, N) if min(C, N) > 0 else 1.0
    return StepBounds(rank, step, resources, C * 1e-6, N * 1e-6, both * 1e-6, U, L, ms, max(0.0, m - busy) * 1e-6,
                      step_time * 1e-6, max(0.0, step_time - m) * 1e-6, rate_makespan(U, L, ms), min(1.0, busy_e))


def trace_bounds(trace: KinetoTrace) -> list[StepBounds]:
    """U, L, E of every step of one rank's trace (see the module's docstring for the definitions).

    Parameters
    ----------
    trace : KinetoTrace
        One rank's trace (:func:`~dlsched.formats.kineto_trace.read_kineto`).

    Returns
    -------
    list of StepBounds
        One per ``ProfilerStep`` in step order; one for the whole trace when it has none. A step
        that launched no device work on a GPU trace is left out (there is nothing to rate).

    Examples
    --------
    >>> import pandas as pd
    >>> from dlsched.formats.kineto_trace import KinetoTrace

    A CPU step: 40 µs of compute, then a 60 µs gloo all-reduce that overlaps 10 µs of the next op.

    >>> ev = pd.DataFrame({"name": ["ProfilerStep#1", "aten::mm", "gloo:all_reduce", "aten::add"],
    ...     "cat": ["user_annotation", "cpu_op", "user_annotation", "cpu_op"], "pid": "1",
    ...     "tid": ["1", "1", "2", "1"], "ts": [0.0, 0.0, 40.0, 90.0], "dur": [110.0, 40.0, 60.0, 20.0],
    ...     "correlation": -1, "external_id": -1, "stream": -1, "args": None})
    >>> ev["end"] = ev.ts + ev.dur
    >>> b, = trace_bounds(KinetoTrace("t.json", ev))
    >>> [round(x * 1e6) for x in (b.upper, b.lower, b.makespan, b.idle)], round(b.efficiency, 3)
    ([120, 60, 110, 0], 0.167)
    """
    events = trace.events
    dev = ke.device_events(events)
    out = []
    if len(dev):
        dev = ke.launches(events)
        at = _attributed(dev)
        for w in step_windows(events).itertuples():
            d, prev_end = _step_device(dev, at, w.ts, w.end)
            if not len(d):
                continue
            # the step's device window opens when its first event starts or the earlier steps' work ends
            w0, w1 = max(float(d["ts"].min()), prev_end), float(d["end"].max())
            s, e = d["ts"].clip(lower=w0).to_numpy(), d["end"].clip(lower=w0).to_numpy()
            comm_m = (d["kind"] == ke.COMMUNICATION).to_numpy()
            early = _length(_subtract(_union(d["ts"], d["end"]), _union([w0], [w1])))
            b = _rate(trace.rank, w.step, "device", _union(s[~comm_m], e[~comm_m]), _union(s[comm_m], e[comm_m]),
                      w1 - w0, w.end - w.ts)
            b.early = early * 1e-6
            out.append(b)
        return out
    host = ke.host_ops(events)
    for w in step_windows(events).itertuples():
        h = host[(host["end"] > w.ts) & (host["ts"] < w.end)]
        s, e = h["ts"].clip(lower=w.ts).to_numpy(), h["end"].clip(upper=w.end).to_numpy()
        coll = h["name"].str.match(COLLECTIVE_HOST).to_numpy()
        comm = _union(s[coll], e[coll])
        # a thread's compute is its ops' time less the collectives it ran itself (nested or its own)
        tid = (h["pid"] + "/" + h["tid"]).to_numpy()
        parts = [_subtract(_union(s[(tid == t) & ~coll], e[(tid == t) & ~coll]),
                           _union(s[(tid == t) & coll], e[(tid == t) & coll])) for t in np.unique(tid)]
        parts = [p for p in parts if len(p)]
        comp = _union(*np.concatenate(parts).T) if parts else np.empty((0, 2))
        out.append(_rate(trace.rank, w.step, "host", comp, comm, float(w.end - w.ts), w.end - w.ts))
    return out
