"""Bounds and efficiency of an iteration of ``W`` workers sharing the servers' links (DESIGN §4.6).

TicTac §3.2 rates one worker: ``U`` runs every op one after another, ``L``
keeps the busiest resource always busy, and ``E = (U − m)/(U − L)``. With
``W`` workers every worker has its own compute resource, while each server
link carries the transfers of all of them. Counting every resource of the
cluster, an iteration of time ``T`` obeys

* ``T ≥ L_W = max(max_w C_w, max_k W·load_k)``: no resource can finish its
  work sooner than it takes (a link serves at most its capacity, however it
  is shared);
* ``T ≤ U_W = Σ`` of all resources' loads: a schedule that never idles a
  resource with ready work keeps at least one resource busy until the end.

Measured iterations are rated from their realised times, as TicTac rates a
trace: a link's load is its busy time (one transfer at a time, or streams
splitting the capacity — either way the busy time is its work), and a
worker's own bounds count each of its ops for its time on the resource (a
transfer's time on the wire, including the slowdown of a shared link,
excluding its wait in the queue). A time outside ``[L, U]`` gets no
efficiency: it is a model error, reported with its size (:func:`rate`).
With ``W = 1`` everything here is :func:`dlsched.analyses.bounds.bounds`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from dlsched.dag import COMPUTE, Graph

from .bounds import Bounds, Rating, bounds

#: Default slack of :func:`rate`, relative to ``U``: floating-point sums of the same work in another order.
RTOL = 1e-9
#: Seconds a time in a dlsched Chrome trace may be off: ts and dur are written to 1 ns, each rounded.
TRACE_ROUNDING = 2e-9

PER_WORKER = ["iteration", "worker", "makespan", "upper", "lower", "efficiency", "model_error", "wait"]
PER_ITERATION = ["iteration", "workers", "iteration_time", "fastest", "slowest", "straggler_share", "upper",
                 "lower", "efficiency", "model_error", "mean_worker_efficiency"]


def load_bounds(loads) -> tuple[float, float]:
    """``(U, L)`` of a set of resource loads: their sum and their maximum (TicTac §3.2, Eqs. 1–2).

    Examples
    --------
    >>> load_bounds([1.0, 3.0, 2.0])
    (6.0, 3.0)
    >>> load_bounds([])
    (0.0, 0.0)
    """
    loads = [float(x) for x in loads]
    return math.fsum(loads), max(loads, default=0.0)


def multiworker_bounds(graph: Graph, times: Mapping[str, float], workers: int) -> Bounds:
    """``U_W`` and ``L_W`` of ``workers`` identical workers sharing the servers' links (DESIGN §4.6).

    Each worker's compute resource carries ``C`` (one worker's load on it), each
    link ``k`` carries ``W·load_k``: ``L_W = max(C, max_k W·load_k)`` and
    ``U_W = Σ`` of all loads ``= W·U``. ``S_W = (U_W − L_W)/L_W``.

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → seconds for every op (every worker alike).
    workers : int
        ``W ≥ 1``.

    Returns
    -------
    Bounds
        ``loads``: a compute resource per worker as ``"w<i>/<resource>"``
        (plain names for one worker), each link with all workers' work.

    Examples
    --------
    Figure 1 of the paper (unit times, both recvs on one link), on two workers:
    the link carries 4 s, each worker's compute 2 s; all of it serialised is 8 s.

    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("fig1")
    >>> for n in ("recv1", "recv2"): _ = g.add_op(n, RECV)
    >>> for n in ("op1", "op2"): _ = g.add_op(n, COMPUTE)
    >>> g.add_edge("recv1", "op1"); g.add_edge("recv1", "op2"); g.add_edge("recv2", "op2")
    >>> t = dict.fromkeys(["recv1", "recv2", "op1", "op2"], 1.0)
    >>> b = multiworker_bounds(g, t, 2)
    >>> b.upper, b.lower, b.speedup
    (8.0, 4.0, 1.0)
    >>> one = multiworker_bounds(g, t, 1)
    >>> (one.upper, one.lower) == (bounds(g, t).upper, bounds(g, t).lower)
    True
    """
    from dlsched.errors import DlschedError

    if int(workers) < 1:
        raise DlschedError(f"the multi-worker bounds need at least 1 worker, got {workers}")
    W = int(workers)
    one = bounds(graph, times)
    if W == 1:
        return one
    loads, ops = {}, {}
    for r, load in one.loads.items():
        if r.startswith(COMPUTE):
            for w in range(W):
                loads[f"w{w}/{r}"], ops[f"w{w}/{r}"] = load, one.ops[r]
        else:
            loads[r], ops[r] = W * load, W * one.ops[r]
    U, L = load_bounds(loads.values())
    return Bounds(U, L, (U - L) / L if U > L and L > 0 else 0.0, loads, ops)


def rate(makespan: float, upper: float, lower: float, tol: float | None = None) -> Rating:
    """Efficiency ``E = (U − T)/(U − L)`` of a time ``T``, or the model error when ``T`` lies outside ``[L, U]``.

    Within ``tol`` of a bound, ``T`` counts as on it (``E`` clipped to
    [0, 1]); farther out there is no efficiency, only the signed distance
    (:class:`~dlsched.analyses.bounds.Rating`). ``E = 1`` when ``U = L``.

    Parameters
    ----------
    makespan, upper, lower : float
        Seconds.
    tol : float, optional
        Absolute slack in seconds; default :data:`RTOL` ``· U``.

    Returns
    -------
    Rating

    Examples
    --------
    >>> rate(3.0, 4.0, 2.0)
    Rating(efficiency=0.5, model_error=0.0)
    >>> rate(4.0 + 1e-12, 4.0, 2.0).efficiency
    0.0
    >>> r = rate(5.0, 4.0, 2.0); r.efficiency, r.model_error, r.relative_error
    (None, 1.0, 0.25)
    """
    T, U, L = float(makespan), float(upper), float(lower)
    tol = RTOL * abs(U) if tol is None else float(tol)
    if T > U + tol:
        return Rating(None, T - U, U)
    if T < L - tol:
        return Rating(None, T - L, L)
    if U <= L:
        return Rating(1.0, 0.0)
    return Rating(min(1.0, max(0.0, (U - T) / (U - L))), 0.0)


def busy_time(intervals) -> float:
    """Length of the union of ``(start, end)`` intervals: how long a resource was busy.

    Examples
    --------
    >>> busy_time([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)])
    4.0
    """
    total, reach = [], -math.inf
    for s, e in sorted(intervals):
        if e <= reach:
            continue
        total.append(e - max(s, reach))
        reach = e
    return math.fsum(total)


def _stats(values) -> dict:
    import numpy as np

    v = np.asarray([x for x in values if x == x], dtype=float)  # NaN: no efficiency (model error)
    if not len(v):
        return {"mean": None, "p50": None, "p95": None, "min": None, "max": None}
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)),
            "min": float(v.min()), "max": float(v.max())}


def rate_iteration(spans, worker_loads, iteration_loads, iteration_time: float | None = None,
                   iteration: int = 0, slack: float = 0.0) -> tuple[list[dict], dict]:
    """Rate one iteration from its loads: each worker against its own bounds, the iteration against ``U_W``, ``L_W``.

    Parameters
    ----------
    spans : sequence of float
        Each worker's makespan ``m_w`` (from the iteration's start to its last end).
    worker_loads : sequence of sequences of float
        Each worker's realised load per resource (its ops' times on the resource).
    iteration_loads : sequence of float
        Every resource's load in the iteration: each worker's compute, each link's work from all workers.
    iteration_time : float, optional
        ``T``; default ``max(spans)``.
    iteration : int
    slack : float
        Seconds of measurement rounding allowed beyond a bound, on top of :data:`RTOL` of it.

    Returns
    -------
    (per_worker, per_iteration) : list of dict, dict
        Rows with the columns :data:`PER_WORKER` and :data:`PER_ITERATION`.

    Examples
    --------
    >>> pw, it = rate_iteration([2.0, 3.0], [[1.0, 1.0], [1.0, 1.0]], [1.0, 1.0, 2.0])
    >>> [(r["efficiency"], r["model_error"]) for r in pw], it["efficiency"], it["straggler_share"]
    ([(0.0, 0.0), (nan, 1.0)], 0.5, 0.3333333333333333)
    """
    slow, fast = max(spans), min(spans)
    T = slow if iteration_time is None else float(iteration_time)
    rows, effs = [], []
    for w, (m, loads) in enumerate(zip(spans, worker_loads)):
        U_w, L_w = load_bounds(loads)
        r = rate(m, U_w, L_w, RTOL * abs(U_w) + slack)
        if r.efficiency is not None:
            effs.append(r.efficiency)
        rows.append({"iteration": int(iteration), "worker": w, "makespan": float(m), "upper": U_w, "lower": L_w,
                     "efficiency": math.nan if r.efficiency is None else r.efficiency,
                     "model_error": r.model_error, "wait": slow - m})
    U, L = load_bounds(iteration_loads)
    r = rate(T, U, L, RTOL * abs(U) + slack)
    return rows, {"iteration": int(iteration), "workers": len(rows), "iteration_time": T, "fastest": fast,
                  "slowest": slow, "straggler_share": (slow - fast) / slow if slow > 0 else 0.0, "upper": U,
                  "lower": L, "efficiency": math.nan if r.efficiency is None else r.efficiency,
                  "model_error": r.model_error,
                  "mean_worker_efficiency": math.fsum(effs) / len(effs) if effs else math.nan}


def rate_ops(frame, rounding: float = 0.0):
    """Rate every worker and iteration of a timeline of realised op executions (DESIGN §4.6).

    Per iteration: ``T`` = last end − first start over all workers; each
    worker's compute resource loads the union of its intervals there, each
    link the union of all workers' intervals on it (its busy time: its work,
    however the link is shared). Per worker: its makespan runs from the
    iteration's first start to its own last end, and is rated against its
    own realised durations summed per resource (:func:`rate_iteration`).

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per op execution: ``worker``, ``kind``, ``resource``,
        ``start``, ``end`` (seconds), optionally ``iteration`` (default 0).
        A transfer starts when it goes on the wire, not when it is queued.
    rounding : float
        Seconds by which each recorded time may be off (a trace's rounding):
        an iteration of ``n`` ops may lie ``n·rounding`` outside a bound.

    Returns
    -------
    (per_worker, per_iteration) : pandas.DataFrame
        Columns :data:`PER_WORKER` and :data:`PER_ITERATION`; ``efficiency``
        is NaN where ``model_error`` is not 0.

    Examples
    --------
    Two workers fetch one parameter (1 s alone) over one serial link, then
    compute 1 s: worker 1 waits 1 s in the link's queue, which its own
    bounds (2 s) do not count; the iteration (3 s) lies within
    ``L_W = 2``, ``U_W = 4``.

    >>> import pandas as pd
    >>> f = pd.DataFrame({"worker": [0, 0, 1, 1], "kind": ["recv", "compute"] * 2,
    ...                   "resource": ["ps:0/down", "compute:0"] * 2,
    ...                   "start": [0.0, 1.0, 1.0, 2.0], "end": [1.0, 2.0, 2.0, 3.0]})
    >>> pw, pi = rate_ops(f)
    >>> pw[["worker", "makespan", "efficiency", "model_error"]].values.tolist()
    [[0.0, 2.0, 0.0, 0.0], [1.0, 3.0, nan, 1.0]]
    >>> pi[["iteration_time", "upper", "lower", "efficiency"]].values.tolist()
    [[3.0, 4.0, 2.0, 0.5]]
    """
    import pandas as pd

    f = frame if "iteration" in frame.columns else frame.assign(iteration=0)
    wrows, irows = [], []
    for it, grp in f.groupby("iteration", sort=True):
        first = float(grp["start"].min())
        spans, worker_loads, iteration_loads = [], [], []
        links: dict[str, list] = {}
        for _, wg in grp.groupby("worker", sort=True):
            own = []
            for res, rg in wg.groupby("resource", sort=True):
                iv = list(zip(rg["start"].astype(float), rg["end"].astype(float)))
                own.append(math.fsum(e - s for s, e in iv))
                if str(res).startswith(COMPUTE):
                    iteration_loads.append(busy_time(iv))
                else:
                    links.setdefault(res, []).extend(iv)
            spans.append(float(wg["end"].max()) - first)
            worker_loads.append(own)
        iteration_loads += [busy_time(iv) for iv in links.values()]
        rows, row = rate_iteration(spans, worker_loads, iteration_loads, float(grp["end"].max()) - first, it,
                                   rounding * len(grp))
        workers = sorted(int(w) for w in grp["worker"].unique())
        for r, w in zip(rows, workers):
            r["worker"] = w
        wrows += rows
        irows.append(row)
    return pd.DataFrame(wrows, columns=PER_WORKER), pd.DataFrame(irows, columns=PER_ITERATION)


def _arg_int(ev: dict, args: dict, key: str, path, default=None) -> int:
    from dlsched.profiling.trace_import import TraceError

    v = args.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or int(v) != v:
        raise TraceError(f"{path}: event {ev.get('name', '?')!r} at ts={ev['ts']:g} has args.{key} = {v!r}; a "
                         f"dlsched trace gives every op a whole, non-negative {key} (rating a trace needs "
                         "args.kind, args.worker, args.resource and, with several iterations, args.iteration, "
                         "as `dlsched simulate --trace-out` and the PyTorch hook write them)")
    return int(v)


def trace_frame(path: str | Path, required: bool = True):
    """The op executions of a dlsched Chrome trace, as the frame :func:`rate_ops` takes.

    Reads the complete events (:func:`dlsched.profiling.trace_import.read_trace_events`);
    each must carry ``args.kind`` (compute, recv or send), ``args.worker``
    and ``args.resource``, optionally ``args.iteration`` (default 0) and
    ``args.priority``. ``ts``/``dur`` are microseconds; a link event's
    name ``w<i>:<op>`` gives the op ``<op>``.

    Parameters
    ----------
    path : str or Path
    required : bool
        Refuse a trace whose events lack these args; with ``False``, answer ``None`` for it
        (any other trace, say PyTorch's own, which only has a span to rate).

    Returns
    -------
    pandas.DataFrame or None
        ``iteration, worker, op, kind, resource, start, end, priority`` (seconds; priority NaN when absent).

    Raises
    ------
    TraceError
        (a :class:`DlschedError`) The file is unreadable or not a trace, or (``required``) an event lacks
        these args.
    """
    import pandas as pd

    from dlsched.dag import KINDS
    from dlsched.profiling.trace_import import TraceError, read_trace_events

    rows = []
    for ev in read_trace_events(path):
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        kind, resource = args.get("kind"), args.get("resource")
        if kind not in KINDS or not isinstance(resource, str) or not resource or "worker" not in args:
            if not required:
                return None
            raise TraceError(f"{path}: event {ev.get('name', '?')!r} at ts={ev['ts']:g} has no args.kind "
                             f"({', '.join(KINDS)}), args.worker and args.resource, so it cannot be rated per "
                             "worker: rating a trace needs dlsched's schema, as `dlsched simulate --trace-out` and "
                             "the PyTorch hook write it (with MODEL --oracle, `bounds --trace` rates any trace's "
                             "span)")
        worker = _arg_int(ev, args, "worker", path)
        name = str(ev.get("name", ""))
        prefix = f"w{worker}:"
        p = args.get("priority")
        rows.append({"iteration": _arg_int(ev, args, "iteration", path, 0), "worker": worker,
                     "op": name[len(prefix):] if name.startswith(prefix) else name, "kind": kind,
                     "resource": resource, "start": ev["ts"] * 1e-6, "end": (ev["ts"] + ev["dur"]) * 1e-6,
                     "priority": float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else math.nan})
    return pd.DataFrame(rows, columns=["iteration", "worker", "op", "kind", "resource", "start", "end", "priority"])


@dataclass(frozen=True)
class TraceRating:
    """A trace's iterations rated (:func:`rate_trace`).

    Attributes
    ----------
    per_worker, per_iteration : pandas.DataFrame
        As :func:`rate_ops`; with an oracle, ``per_iteration`` adds
        ``predicted_upper``, ``predicted_lower``, ``predicted_efficiency``
        and ``predicted_model_error`` (the time against the oracle's
        :func:`multiworker_bounds`).
    """

    per_worker: object
    per_iteration: object

    def summary(self) -> dict:
        """Iterations and workers; mean, p50, p95, min and max of the iteration time, straggler share and E
        (over the iterations that have one); how many iterations lie outside their bounds, and the largest error."""
        pi, pw = self.per_iteration, self.per_worker
        errors = pi["model_error"].to_numpy(dtype=float)
        out = {"iterations": len(pi), "workers": int(pi["workers"].max()) if len(pi) else 0,
               "iteration_time": _stats(pi["iteration_time"]), "straggler_share": _stats(pi["straggler_share"]),
               "efficiency": _stats(pi["efficiency"]), "worker_efficiency": _stats(pw["efficiency"]),
               "model_errors": int((errors != 0).sum()),
               "largest_model_error": float(errors[abs(errors).argmax()]) if len(errors) else 0.0,
               "worker_model_errors": int((pw["model_error"].to_numpy(dtype=float) != 0).sum())}
        if "predicted_efficiency" in pi.columns:
            out["predicted_efficiency"] = _stats(pi["predicted_efficiency"])
            out["predicted_model_errors"] = int((pi["predicted_model_error"].to_numpy(dtype=float) != 0).sum())
        return out


def rate_trace(path: str | Path, graph: Graph | None = None, times: Mapping[str, float] | None = None,
               required: bool = True) -> TraceRating | None:
    """Rate every worker and iteration of a dlsched Chrome trace (:func:`trace_frame`, :func:`rate_ops`).

    With ``graph`` and ``times`` each iteration's time is also rated against
    the oracle's bounds for that iteration's number of workers
    (:func:`multiworker_bounds`): the prediction's view of the same run.

    Parameters
    ----------
    path : str or Path
    graph : Graph, optional
    times : mapping, optional
        Op name → seconds (with ``graph``).
    required : bool
        As :func:`trace_frame`: with ``False``, ``None`` for a trace not in dlsched's schema.

    Returns
    -------
    TraceRating or None

    Raises
    ------
    TraceError
        As :func:`trace_frame`.

    Examples
    --------
    >>> import json, os, tempfile
    >>> ev = lambda w, kind, res, ts, dur: {"ph": "X", "name": "op", "ts": ts, "dur": dur,
    ...                                     "args": {"kind": kind, "worker": w, "resource": res}}
    >>> p = os.path.join(tempfile.mkdtemp(), "t.json")
    >>> _ = open(p, "w").write(json.dumps({"traceEvents": [
    ...     ev(0, "recv", "ps:0/down", 0, 1000), ev(0, "compute", "compute:0", 1000, 1000),
    ...     ev(1, "recv", "ps:0/down", 1000, 1000), ev(1, "compute", "compute:0", 2000, 1000)]}))
    >>> r = rate_trace(p)
    >>> r.per_iteration[["iteration_time", "efficiency", "straggler_share"]].round(6).values.tolist()
    [[0.003, 0.5, 0.333333]]
    >>> r.summary()["worker_model_errors"]
    1
    """
    frame = trace_frame(path, required)
    if frame is None:
        return None
    pw, pi = rate_ops(frame, rounding=TRACE_ROUNDING)
    if graph is not None and times is not None:
        cols = {"predicted_upper": [], "predicted_lower": [], "predicted_efficiency": [],
                "predicted_model_error": []}
        for T, W in zip(pi["iteration_time"], pi["workers"]):
            b = multiworker_bounds(graph, times, int(W))
            r = rate(float(T), b.upper, b.lower)
            for k, v in zip(cols, (b.upper, b.lower, math.nan if r.efficiency is None else r.efficiency,
                                   r.model_error)):
                cols[k].append(v)
        pi = pi.assign(**cols)
    return TraceRating(pw, pi)
