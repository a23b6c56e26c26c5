"""Discrete-event simulation of one training iteration on one worker (DESIGN §4.6).

The model is TicTac's (§3.1): every resource (the compute resource and each
parameter-server link ``ps:K/down`` / ``ps:K/up``) runs one op at a time,
never preempts, and never idles while it has a ready op. An op is ready when
all its predecessors are done; recv ops (the roots) are ready at time 0.

* The compute resource takes ready ops first-ready-first, canonical index on ties.
* A downlink takes the ready transfer with the lowest priority number;
  transfers without a priority come after prioritised ones. Equal priorities
  go to canonical order; transfers without any priority go in a seeded random
  order (``unordered="random"``, what an unordered framework does, TicTac §2.2)
  or in canonical order (``unordered="canonical"``).
* Gradient sends are not prioritised: an uplink takes them first-ready-first
  (canonical index on ties), like the compute resource.

Simultaneous completions are handled as one step: every op finishing at time
``t`` releases its successors before any resource picks its next op at ``t``.
The makespan is the end of the last op, so ``L ≤ makespan ≤ U`` (TicTac §3.2).

The hot loop works on integer indices and plain lists with ``heapq`` (no
networkx), so a schedule of thousands of ops takes milliseconds.

The event loop's semantics have one home, the multi-worker loop
:func:`dlsched.analyses.multiworker.run_workers`; :func:`run_compiled` is its
one-worker fast path (tests/test_multiworker.py holds them equal, and
``simulate_workers`` at W = 1 equal to :func:`simulate`).
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from dlsched.dag import RECV, Graph
from dlsched.errors import DlschedError

from .properties import check_times

UNORDERED_MODES = ("random", "canonical")


@dataclass
class SimGraph:
    """A graph compiled to integer arrays for the simulator.

    Ops are numbered in canonical order; ``succ[i]`` lists the successors of op
    ``i``, ``res[i]`` its resource number (``resources[res[i]]`` is its name).
    """

    graph: Graph
    names: list[str]
    kinds: list[str]
    res: list[int]
    resources: list[str]
    succ: list[list[int]]
    indeg: list[int]
    recv_ids: list[int]
    dur: list[float]

    @property
    def n(self) -> int:
        return len(self.names)


def compile_graph(graph: Graph, times: Mapping[str, float]) -> SimGraph:
    """Compile ``graph`` and its time oracle into a :class:`SimGraph`.

    Raises
    ------
    OracleError
        ``times`` misses ops of the graph, or gives a negative or non-finite time.
    """
    ops = graph.ops()
    names = [op.name for op in ops]
    pos = {n: i for i, n in enumerate(names)}
    check_times(graph, times, names)
    dur = [float(times[n]) for n in names]
    resources = graph.resources()
    rpos = {r: k for k, r in enumerate(resources)}
    succ: list[list[int]] = [[] for _ in names]
    indeg = [0] * len(names)
    for n, nbrs in graph.nx.adjacency():  # plain dict access: compile cost stays below the run's
        out = succ[pos[n]]
        for m in nbrs:
            j = pos[m]
            out.append(j)
            indeg[j] += 1
    return SimGraph(graph, names, [op.kind for op in ops], [rpos[op.resource] for op in ops], resources,
                    succ, indeg, [i for i, op in enumerate(ops) if op.kind == RECV], dur)


def transfer_ranks(sg: SimGraph, priorities: Mapping[str, int] | None, seed: int = 0,
                   unordered: str = "random") -> list[int]:
    """Rank every op for channel selection: lower rank is served first.

    Prioritised recvs rank by (priority, canonical index); recvs without a
    priority rank after all of them, in a seeded random order or canonical order.
    Only recv ranks matter; other ops get their own index.
    """
    if unordered not in UNORDERED_MODES:
        raise DlschedError(f"unknown unordered mode {unordered!r}; expected one of {', '.join(UNORDERED_MODES)}")
    priorities = priorities or {}
    unknown = [n for n in priorities if n not in sg.graph or sg.graph.op(n).kind != RECV]
    if unknown:
        raise DlschedError(f"priorities name {len(unknown)} op(s) that are not parameter transfers (recv ops) of model "
                           f"{sg.graph.name!r}: {', '.join(map(str, unknown[:5]))}")
    given = [i for i in sg.recv_ids if sg.names[i] in priorities]
    rest = [i for i in sg.recv_ids if sg.names[i] not in priorities]
    given.sort(key=lambda i: (priorities[sg.names[i]], i))
    if unordered == "random" and rest:
        random.Random(seed).shuffle(rest)
    rank = list(range(sg.n))
    for r, i in enumerate(given + rest):
        rank[i] = r
    return rank


def run_compiled(sg: SimGraph, rank: list[int], dur: list[float] | None = None) -> tuple[list[float], list[float]]:
    """Simulate a compiled graph; returns ``(start, end)`` lists by op number.

    ``rank`` orders the recvs on their channel (see :func:`transfer_ranks`).
    This is the hot loop: plain lists and heaps only.
    """
    dur = sg.dur if dur is None else dur
    n = sg.n
    res, succ, kinds = sg.res, sg.succ, sg.kinds
    remaining = sg.indeg[:]
    start = [0.0] * n
    end = [0.0] * n
    nres = len(sg.resources)
    ready: list[list] = [[] for _ in range(nres)]
    busy = [False] * nres
    is_recv = [k == RECV for k in kinds]
    push, pop = heapq.heappush, heapq.heappop
    for i in range(n):
        if remaining[i] == 0:
            # recvs by rank; everything else first-ready-first: all ready at 0, canonical ties
            ready[res[i]].append((rank[i] if is_recv[i] else 0.0, i))
    for q in ready:
        heapq.heapify(q)
    events: list[tuple[float, int]] = []
    t = 0.0
    for k in range(nres):
        if ready[k]:
            i = pop(ready[k])[1]
            busy[k] = True
            start[i] = 0.0
            e = dur[i]
            end[i] = e
            push(events, (e, i))
    done = 0
    touched: list[int] = []
    while events:
        t, i = pop(events)
        batch = [i]
        while events and events[0][0] == t:
            batch.append(pop(events)[1])
        touched.clear()
        for i in batch:
            done += 1
            k = res[i]
            busy[k] = False
            touched.append(k)
            for j in succ[i]:
                remaining[j] -= 1
                if remaining[j] == 0:
                    kj = res[j]
                    push(ready[kj], (rank[j] if is_recv[j] else t, j))
                    touched.append(kj)
        for k in touched:
            if not busy[k] and ready[k]:
                j = pop(ready[k])[1]
                busy[k] = True
                start[j] = t
                e = t + dur[j]
                end[j] = e
                push(events, (e, j))
    if done != n:
        raise DlschedError(f"simulation of model {sg.graph.name!r} stalled after {done} of {n} ops; "
                           "the graph has a cycle")
    return start, end


@dataclass
class Schedule:
    """One simulated iteration.

    Attributes
    ----------
    makespan : float
        End of the last op (seconds).
    starts, ends : numpy.ndarray
        Start/end times by canonical op position (``names``).
    start, end : dict
        The same as ``{op name: seconds}``.
    priorities : dict or None
        The priorities that were enforced (``None``: unordered baseline).
    """

    graph: Graph
    names: list[str]
    kinds: list[str]
    resources: list[str]
    starts: np.ndarray
    ends: np.ndarray
    priorities: dict | None = None
    ranks: list[int] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return float(self.ends.max()) if len(self.ends) else 0.0

    @property
    def start(self) -> dict[str, float]:
        return dict(zip(self.names, self.starts.tolist()))

    @property
    def end(self) -> dict[str, float]:
        return dict(zip(self.names, self.ends.tolist()))

    def transfer_order(self) -> list[str]:
        """Recv names in the order their transfers started (ties: canonical)."""
        recv = [i for i, k in enumerate(self.kinds) if k == RECV]
        return [self.names[i] for i in sorted(recv, key=lambda i: (self.starts[i], i))]

    def frame(self):
        """The timeline as a DataFrame: op, kind, resource, start, end, priority.

        ``priority`` is the enforced priority number of a recv (NaN when none).
        """
        import pandas as pd

        prio = self.priorities or {}
        return pd.DataFrame({
            "op": self.names,
            "kind": self.kinds,
            "resource": self.resources,
            "start": self.starts,
            "end": self.ends,
            "priority": [prio.get(n, np.nan) for n in self.names],
        })


def simulate(graph: Graph, times: Mapping[str, float], priorities: Mapping[str, int] | None = None,
             seed: int = 0, unordered: str = "random") -> Schedule:
    """Simulate one iteration of ``graph`` on one worker under a transfer order.

    Parameters
    ----------
    graph : Graph
    times : dict
        ``{op name: seconds}`` for every op (the time oracle).
    priorities : dict, optional
        ``{recv name: priority number}``; lower goes first. ``None`` gives the
        unordered baseline: every transfer without a priority is picked at
        random (seeded) among the ready ones.
    seed : int
        Seed of the random pick for transfers without a priority.
    unordered : {"random", "canonical"}
        How transfers without a priority are ordered among themselves.

    Returns
    -------
    Schedule

    Raises
    ------
    OracleError
        ``times`` misses ops.
    DlschedError
        ``priorities`` names ops that are not transfers of the graph.

    Examples
    --------
    TicTac Figure 1: ``recv1 → op1``, ``recv1, recv2 → op2``, unit times.

    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("fig1")
    >>> for n in ("recv1", "recv2"): _ = g.add_op(n, RECV)
    >>> for n in ("op1", "op2"): _ = g.add_op(n, COMPUTE)
    >>> for u, v in [("recv1", "op1"), ("recv1", "op2"), ("recv2", "op2")]: g.add_edge(u, v)
    >>> t = dict.fromkeys(["recv1", "recv2", "op1", "op2"], 1.0)
    >>> simulate(g, t, {"recv1": 0, "recv2": 1}).makespan, simulate(g, t, {"recv2": 0, "recv1": 1}).makespan
    (3.0, 4.0)

    References
    ----------
    TicTac §3.1 (the scheduling model and priority enforcement), §3.2 (bounds).
    """
    sg = compile_graph(graph, times)
    rank = transfer_ranks(sg, priorities, seed, unordered)
    start, end = run_compiled(sg, rank)
    return Schedule(graph, sg.names, sg.kinds, [sg.resources[k] for k in sg.res], np.asarray(start),
                    np.asarray(end), dict(priorities) if priorities is not None else None, rank)
