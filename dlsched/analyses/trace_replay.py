"""A measured step rebuilt as a DAG and replayed: the base of every what-if on a trace (DESIGN §4.9).

Each ``ProfilerStep`` of a Kineto trace becomes a :class:`~dlsched.dag.Graph`
whose ops carry measured durations but no start times; the simulator
(:func:`~dlsched.analyses.simulate.simulate`) re-derives every start from the
dependencies, and the predicted step is the moment the step's own host thread
reaches its end. The graph:

- **Host threads** are resources (``host:TID``). A thread's time from the step's
  start is cut into pieces, in order: host work (its ``cpu_op`` /
  ``user_annotation`` time *and the gaps between them*: Python and framework
  work the profiler does not name, which is what a host-bound step spends its
  time on) and its runtime calls. A launch (``cudaLaunchKernel``,
  ``hipExtModuleLaunchKernel``, ``cudaMemcpyAsync`` …) keeps its measured
  duration and precedes the device events it queued (``correlation``).
- **Syncs** make the host wait for the device: a ``*Synchronize`` call, a
  ``cudaFree`` / ``hipFree``, a blocking ``cudaMemcpy`` / ``hipMemcpy*``, and a
  ``*MemcpyAsync`` that returned only after its own copy ended (a copy to
  pageable memory, what ``aten::item`` / ``_local_scalar_dense`` do). The call
  waits for the last device event launched before it on each stream it
  synchronised (the stream of Kineto's ``cuda_sync`` event when recorded; else
  every stream whose last such event ended before the call returned), then
  takes what it measurably took after that event's end.
- **Streams** are resources (``stream:ID``): each kernel, copy or collective
  kernel runs after the launch that issued it and after the previous event on
  its stream. A stream that waited on an event (``cudaStreamWaitEvent`` /
  ``hipStreamWaitEvent``) waits, for the next event the same thread launches,
  for the last event launched on each other stream before the wait, where that
  event ended before it started. Work the step's predecessors left on a stream
  is one carried-over op at its head.
- **Other host threads** (the autograd engine's device threads, gloo's
  threads) are coupled to the step's thread where they go idle: an op that
  starts after a gap waits for the step's thread to reach that moment, and the
  step's thread, past the end of an op followed by a gap, waits for it. So the
  main thread waiting in ``backward()`` resumes when the backward pass's last
  op ends, whatever that op's duration.
- **Collectives** are NCCL/RCCL kernels on their stream (GPU) or host work on
  the threads that run them (gloo, CPU).

A resource runs its ops in trace order (each op depends on the one before it),
so the simulator's choice among ready ops never arises and the replay is an
as-soon-as-possible schedule of a fixed order: shortening any op never
lengthens it, and an unchanged step replays to its measured time up to what
the model leaves out (a kernel starts at the end of its launch call, a sync's
target is inferred). Times are seconds.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from dlsched.dag import COMPUTE, Graph
from dlsched.formats.kineto_trace import KinetoTrace
from dlsched.profiling import kineto_events as ke

from .simulate import simulate
from .trace_bounds import _union, step_windows

_SYNC = re.compile(r"Synchronize|^(?:cuda|hip)Free$|^(?:cuda|hip)Memcpy(?:2D|3D)?$|^hipMemcpyWithStream$")
_MEMCPY_ASYNC = re.compile(r"Memcpy.*Async|MemcpyAsync")
_STREAM_WAIT = re.compile(r"StreamWaitEvent")
_US = 1e-6
#: Measured times are whole or fractional microseconds; an event that ends this close after a call
#: returned is taken as awaited by it (clock rounding).
_TOL = 1.0


@dataclass
class StepGraph:
    """One measured step as a DAG with its measured op durations.

    Attributes
    ----------
    graph : Graph
        Ops on resources ``host:PID/TID``, ``stream:ID``, ``carry:ID`` and ``release:N``.
    times : dict
        Op name → seconds.
    main : list of str
        The ops of the step's own thread, in order; the last one's end is the predicted step time.
    kernels : dict
        Op name → the device event's row label in the trace's frame (kernels, copies, collectives).
    step : int or None
    measured : float
        The ``ProfilerStep`` span (seconds).
    """

    graph: Graph
    times: dict
    main: list
    kernels: dict
    step: int | None
    measured: float
    kinds: dict = field(default_factory=dict)


@dataclass
class Replay:
    """A replayed step: predicted against measured."""

    rank: int | None
    step: int | None
    measured: float
    predicted: float
    makespan: float
    ops: int

    @property
    def error(self) -> float:
        """``(predicted − measured) / measured``."""
        return (self.predicted - self.measured) / self.measured if self.measured > 0 else 0.0

    def to_dict(self) -> dict:
        return {"rank": self.rank, "step": self.step, "measured": self.measured, "predicted": self.predicted,
                "error": self.error, "makespan": self.makespan, "ops": self.ops}


def _overlaps(u: np.ndarray, lo: float, hi: float) -> bool:
    """Whether the union ``u`` (sorted disjoint rows) meets the open interval ``(lo, hi)``."""
    if not len(u):
        return False
    i = int(np.searchsorted(u[:, 0], hi, side="left"))  # rows starting before hi
    return i > 0 and u[i - 1, 1] > lo if i else False


def _top_level(ops: pd.DataFrame) -> tuple[list[tuple[float, float]], list[str]]:
    """The outermost intervals of one thread's ops, in order (nested ops dropped), and their names."""
    out: list[tuple[float, float]] = []
    names: list[str] = []
    reach = -math.inf
    for s, e, n in zip(ops["ts"].to_numpy(), ops["end"].to_numpy(), ops["name"]):
        if s >= reach:
            out.append((float(s), float(e)))
            names.append(n)
            reach = e
        elif e > reach:  # a sibling that overlaps its predecessor: extend the last one
            out[-1] = (out[-1][0], float(e))
            reach = e
    return out, names


class _Builder:
    """Builds one step's graph; ops get names in creation order, so the canonical index is time order."""

    def __init__(self, name: str):
        self.g = Graph(name, "training")
        self.times: dict[str, float] = {}
        self.kinds: dict[str, str] = {}
        self.n = 0

    def op(self, resource: str, seconds: float, kind: str, label: str = "", after=()) -> str:
        name = f"{self.n}:{kind}"
        self.n += 1
        self.g.add_op(name, COMPUTE, resource=resource, op_type=label or kind)
        self.times[name] = max(0.0, float(seconds))
        self.kinds[name] = kind
        for p in after:
            if p is not None:
                self.g.add_edge(p, name)
        return name


def build_step(trace: KinetoTrace | pd.DataFrame, step: int | None = None) -> StepGraph:
    """The DAG of one measured step (see the module's docstring).

    Parameters
    ----------
    trace : KinetoTrace or its events frame
    step : int, optional
        ``N`` of ``ProfilerStep#N``; default the first step (the whole trace when it has none).

    Raises
    ------
    KeyError
        No ``ProfilerStep#step`` in the trace.
    """
    events = trace.events if isinstance(trace, KinetoTrace) else trace
    windows = step_windows(events)
    if step is None:
        w = windows.iloc[0]
    else:
        hit = windows[windows["step"] == step]
        if not len(hit):
            raise KeyError(f"no ProfilerStep#{step} in the trace")
        w = hit.iloc[0]
    return _build(events, w, _Shared(events))


class _Shared:
    """What every step of one trace reads: its device events with their launches, host ops, runtime calls."""

    def __init__(self, events: pd.DataFrame):
        self.dev = ke.launches(events) if len(ke.device_events(events)) else None
        if self.dev is not None:
            at = self.dev["launch_ts"].copy()
            first = self.dev["ts"].where(at.notna()).groupby(self.dev["stream"]).transform("min").fillna(np.inf)
            at[at.isna() & (self.dev["ts"] < first)] = -np.inf  # queued before the trace began
            self.dev = self.dev.assign(at=at).sort_values(["stream", "ts"], kind="stable")
        self.host = ke.host_ops(events).sort_values(["ts", "dur"], ascending=[True, False], kind="stable")
        self.rt = ke.runtime_events(events).sort_values("ts", kind="stable")
        sync = events[events["cat"] == "cuda_sync"]
        self.sync_stream = dict(zip(sync["correlation"], sync["stream"])) if len(sync) else {}


def _build(events: pd.DataFrame, w, sh: _Shared) -> StepGraph:
    t0, t1 = float(w.ts), float(w.end)
    main_key = (str(w.pid), str(w.tid))
    b = _Builder(f"step {w.step}")

    # -- the step's device events and what earlier steps left on each stream --------------------
    if sh.dev is not None:
        dev = sh.dev
        mine = dev[(dev["at"] >= t0) & (dev["at"] < t1)]
        carry = dev[dev["at"] < t0].groupby("stream")["end"].max()
        # unlaunched events inside the window (their launch was not recorded): released at their start
        loose = dev[dev["at"].isna() & (dev["ts"] >= t0) & (dev["ts"] < t1)]
        mine = pd.concat([mine, loose]).sort_values(["stream", "ts"], kind="stable")
    else:
        mine = pd.DataFrame(columns=["stream", "ts", "end", "dur", "correlation", "launch_ts", "launch_tid"])
        carry = pd.Series(dtype=float)

    # -- host threads: top-level ops and runtime calls within the window -------------------------
    host = sh.host[(sh.host["end"] > t0) & (sh.host["ts"] < t1)]
    rt = sh.rt[(sh.rt["ts"] >= t0) & (sh.rt["ts"] < t1)]
    launching = set(mine["correlation"][mine["correlation"] >= 0].tolist())
    threads: dict[tuple, dict] = {}
    for key, g in host.groupby(["pid", "tid"], sort=False):
        tops, names = _top_level(g.assign(ts=g["ts"].clip(lower=t0), end=g["end"].clip(upper=t1)))
        top_set = set(tops)
        nested = [(a, e) for a, e in zip(g["ts"].to_numpy(), g["end"].to_numpy()) if (a, e) not in top_set]
        threads[(str(key[0]), str(key[1]))] = {"ops": tops, "names": names, "nested": nested}
    for key, g in rt.groupby(["pid", "tid"], sort=False):
        k = (str(key[0]), str(key[1]))
        useful = g["correlation"].isin(launching) | g["name"].str.contains(_SYNC) | g["name"].str.contains(
            _STREAM_WAIT)
        if k not in threads and not useful.any():
            continue  # a thread of polls (cudaEventQuery) that neither launches nor waits
        threads.setdefault(k, {"ops": []})["rt"] = g
    threads.setdefault(main_key, {"ops": []})

    # runtime calls, outermost only, per thread
    calls: dict[tuple, list] = {}
    for k, th in threads.items():
        g = th.get("rt")
        lst = []
        reach = -math.inf
        if g is not None:
            for r in g.itertuples(index=False):
                if r.ts >= reach:
                    lst.append(r)
                    reach = r.end
        calls[k] = lst

    # fork / join times of the other threads with ops: after and before their idle gaps
    forks: dict[tuple, list] = {}
    joins: dict[tuple, list] = {}
    for k, th in threads.items():
        if k == main_key or not th["ops"]:
            continue
        ops = [o for o in th["ops"] if o[1] > o[0]]  # an instant has no start to wake at, no end to wait for
        forks[k] = [s for i, (s, _) in enumerate(ops) if s > t0 and (i == 0 or s > ops[i - 1][1])]
        joins[k] = [e for i, (_, e) in enumerate(ops) if e < t1 and (i == len(ops) - 1 or ops[i + 1][0] > e)]

    # the main thread's cuts: its own calls, and the others' forks and joins (moved out of its calls)
    def _outside_calls(times, lst, to_start):
        if not lst:
            return times
        starts = np.array([c.ts for c in lst])
        ends = np.array([c.end for c in lst])
        out = []
        for t in times:
            i = np.searchsorted(starts, t, side="right") - 1
            if i >= 0 and starts[i] < t < ends[i]:
                t = float(starts[i] if to_start else ends[i])
            out.append(t)
        return out

    main_calls = calls[main_key]
    fork_at = {k: _outside_calls(v, main_calls, True) for k, v in forks.items()}
    join_at = {k: _outside_calls(v, main_calls, False) for k, v in joins.items()}
    extra_cuts = sorted({t for v in fork_at.values() for t in v} | {t for v in join_at.values() for t in v})

    # -- build each thread's chain ------------------------------------------------------------------
    own_end = mine[mine["correlation"] >= 0].groupby("correlation")["end"].max().to_dict()
    launch_node: dict[int, str] = {}   # correlation → launch op
    pending_syncs = []                 # (op, call row) resolved once the device ops exist
    pending_waits = []                 # (thread key, call end) stream waits
    piece_end: dict[tuple, dict] = {}  # thread → {time: op ending there}
    piece_start: dict[tuple, dict] = {}
    main_ops: list[str] = []
    idle: set[str] = set()  # pieces in which the thread ran nothing the trace names: a wait, if anything
    for k in [main_key] + [k for k in threads if k != main_key]:
        th = threads[k]
        busy = _union([a for a, _ in th.get("nested", [])] + [c.ts for c in calls[k]],
                      [e for _, e in th.get("nested", [])] + [c.end for c in calls[k]])
        res = f"host:{k[0]}/{k[1]}"
        hi = t1 if k == main_key else max([e for _, e in th["ops"]] + [c.end for c in calls[k]] + [t0])
        cuts = [(float(c.ts), float(c.end), c) for c in calls[k]]
        own_cuts = extra_cuts if k == main_key else forks.get(k, []) + joins.get(k, [])
        cuts += [(t, t, None) for t in own_cuts]
        tops = th["ops"]
        cuts += [(t, t, None) for op in tops for t in op]
        cuts.sort(key=lambda x: (x[0], x[1]))
        top_s = np.array([o[0] for o in tops])
        top_e = np.array([o[1] for o in tops])
        names = th.get("names", [])

        def label(lo: float, hi_: float) -> tuple[str, str]:
            """``host`` and the op's name for time inside a top-level op, else ``gap``."""
            i = int(np.searchsorted(top_s, (lo + hi_) / 2, side="right")) - 1
            if i >= 0 and top_e[i] >= (lo + hi_) / 2:
                return "host", names[i]
            return "gap", ""

        ends_at: dict[float, str] = {}
        starts_at: dict[float, str] = {}
        nodes: list[str] = []
        cur, prev = t0, None

        def add(node: str, start: float, end: float) -> None:
            if b.kinds[node] == "gap" or (b.kinds[node] == "host" and not _overlaps(busy, start, end)):
                idle.add(node)
            starts_at.setdefault(start, node)
            ends_at[end] = node
            nodes.append(node)

        for s, e, c in cuts:
            s, e = min(max(s, t0), hi), min(e, hi)
            if s > cur:  # host work up to the cut
                prev = b.op(res, (s - cur) * _US, *label(cur, s), after=[prev])
                add(prev, cur, s)
                cur = s
            if c is None or e < cur:
                continue
            corr = int(c.correlation)
            launches = corr in own_end
            blocking = bool(_SYNC.search(c.name)) or (launches and bool(_MEMCPY_ASYNC.search(c.name))
                                                      and own_end[corr] <= c.end + _TOL)
            if blocking:
                if launches:
                    prev = launch_node[corr] = b.op(res, 0.0, "launch", c.name, [prev])
                    add(prev, cur, cur)
                n = b.op(res, (e - cur) * _US, "sync", c.name, [prev])
                pending_syncs.append((n, c))
            else:
                n = b.op(res, (e - cur) * _US, "launch" if launches else "runtime", c.name, [prev])
                if launches:
                    launch_node[corr] = n
                if _STREAM_WAIT.search(c.name):
                    pending_waits.append((k, float(c.end)))
            add(n, cur, e)
            prev, cur = n, e
        if hi > cur or not nodes:
            prev = b.op(res, (hi - cur) * _US, *label(cur, hi), after=[prev])
            add(prev, cur, hi)
        piece_end[k], piece_start[k] = ends_at, starts_at
        if k == main_key:
            main_ops = nodes

    # -- couple the other threads to the step's thread ------------------------------------------
    main_end, main_start = piece_end[main_key], piece_start[main_key]
    main_end_times = np.array(sorted(main_end))
    for k in forks:
        for t_own, t_main in zip(forks[k], fork_at[k]):
            src = main_end.get(t_main)
            if src is None:
                i = np.searchsorted(main_end_times, t_main, side="right") - 1
                src = main_end[main_end_times[i]] if i >= 0 else None
            # the other thread's idle time before it wakes is a wait for the step's thread
            dst = piece_end[k].get(t_own)
            if dst in idle:
                b.times[dst] = 0.0
            else:
                dst = piece_start[k].get(t_own)
            if src is not None and dst is not None and src != dst:
                b.g.add_edge(src, dst)
        for t_own, t_main in zip(joins[k], join_at[k]):
            src = piece_end[k].get(t_own)
            # the step's thread idle until the other thread's op ended was waiting for it
            dst = main_end.get(t_main)
            if dst in idle:
                b.times[dst] = 0.0
            else:
                dst = main_start.get(t_main)
            if src is not None and dst is not None:
                b.g.add_edge(src, dst)

    # -- device streams ---------------------------------------------------------------------------
    kernels: dict[str, object] = {}
    last_on: dict[int, str] = {}
    dev_rows = []  # (op, stream, launch time, measured start, measured end, launch tid)
    for s, c_end in carry.items():
        if c_end > t0:
            last_on[int(s)] = b.op(f"carry:{s}", (c_end - t0) * _US, "carry")
            dev_rows.append((last_on[int(s)], int(s), -math.inf, t0, float(c_end), None))
    nrel = 0
    for idx, r in zip(mine.index, mine.itertuples(index=False)):
        s = int(r.stream)
        preds = [last_on.get(s)]
        if r.correlation in launch_node:
            preds.append(launch_node[r.correlation])
        else:  # launched where the trace does not show: released at its measured start
            preds.append(b.op(f"release:{nrel}", (r.ts - t0) * _US, "release"))
            nrel += 1
        n = b.op(f"stream:{s}", r.dur * _US, ke.COMMUNICATION if r.kind == ke.COMMUNICATION else "kernel", r.name,
                 preds)
        kernels[n] = idx
        last_on[s] = n
        lt = r.launch_ts if r.launch_ts == r.launch_ts else r.ts
        dev_rows.append((n, s, float(lt), float(r.ts), float(r.end), r.launch_tid))
    per_stream: dict[int, tuple] = {}
    if dev_rows:
        dv = pd.DataFrame(dev_rows, columns=["op", "stream", "launch", "ts", "end", "tid"])
        for st, g in dv.groupby("stream", sort=True):
            per_stream[st] = (np.maximum.accumulate(g["launch"].to_numpy()), g["op"].tolist(), g["ts"].to_numpy(),
                              g["end"].to_numpy())
        by_tid = {t: g.sort_values("launch", kind="stable") for t, g in dv[dv["tid"].notna()].groupby("tid")}

    def last_before(x: float, side: str) -> list[tuple[int, str, float]]:
        """Per stream, the last event launched before ``x``: (stream, op, measured end)."""
        out = []
        for st, (la, ops, _, ends) in per_stream.items():
            i = int(np.searchsorted(la, x, side=side)) - 1
            if i >= 0:
                out.append((st, ops[i], float(ends[i])))
        return out

    # stream waits: the next event the thread launches waits for the others' last ones
    for k, t in pending_waits:
        mine_t = by_tid.get(k[1]) if per_stream else None
        if mine_t is None:
            continue
        i = int(np.searchsorted(mine_t["launch"].to_numpy(), t, side="left"))
        if i >= len(mine_t):
            continue
        target = mine_t.iloc[i]
        for st, op, end in last_before(t, "left"):
            if st != target.stream and end <= target.ts + _TOL:
                b.g.add_edge(op, target.op)

    # syncs: the host waits for the last event launched before the call on each stream it synchronised
    for n, c in pending_syncs:
        last = last_before(float(c.ts), "right")
        stream = sh.sync_stream.get(c.correlation)
        if stream is not None and stream >= 0 and "Stream" in c.name:
            last = [x for x in last if x[0] == stream]
        last = [x for x in last if x[2] <= c.end + _TOL]
        if not last:
            continue
        for _, op, _ in last:
            b.g.add_edge(op, n)
        waited_until = max(x[2] for x in last)
        b.times[n] = min(c.end - c.ts, max(0.0, c.end - waited_until)) * _US

    return StepGraph(b.g, b.times, main_ops, kernels, None if w.step is None else int(w.step), (t1 - t0) * _US,
                     b.kinds)


def predict(sg: StepGraph, times: Mapping[str, float] | None = None) -> tuple[float, float]:
    """Replay a step graph: ``(predicted step time, makespan of every op)`` in seconds.

    ``times`` overrides the measured durations (a what-if); ops it does not name keep theirs.
    """
    t = dict(sg.times)
    if times:
        t.update(times)
    sched = simulate(sg.graph, t, unordered="canonical")
    end = sched.end
    return max(end[n] for n in sg.main), sched.makespan


def replay_trace(trace: KinetoTrace) -> list[Replay]:
    """Every step of one rank's trace replayed (one for the whole trace when it has no steps).

    Examples
    --------
    A host-bound step: two ops and the gap between them on one thread, replayed to its span.

    >>> import pandas as pd
    >>> ev = pd.DataFrame({"name": ["ProfilerStep#3", "aten::mm", "aten::add"], "cat": ["user_annotation",
    ...     "cpu_op", "cpu_op"], "pid": "1", "tid": "1", "ts": [0.0, 10.0, 50.0], "dur": [100.0, 30.0, 20.0],
    ...     "correlation": -1, "external_id": -1, "stream": -1, "args": None})
    >>> ev["end"] = ev.ts + ev.dur
    >>> r, = replay_trace(KinetoTrace("t.json", ev))
    >>> r.step, round(r.predicted * 1e6, 6), r.error
    (3, 100.0, 0.0)
    """
    events = trace.events
    sh = _Shared(events)
    out = []
    for w in step_windows(events).itertuples():
        sg = _build(events, w, sh)
        pred, mk = predict(sg)
        out.append(Replay(trace.rank, sg.step, sg.measured, pred, mk, len(sg.graph)))
    return out


def median_error(replays: list[Replay]) -> float:
    """The median of the steps' absolute relative errors."""
    return float(np.median([abs(r.error) for r in replays])) if replays else 0.0
