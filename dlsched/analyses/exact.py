"""The optimal strict order of parameter transfers, by branch-and-bound (DESIGN §4.5).

Finding the order of recv transfers that minimises the iteration's makespan is
NP-hard (TicTac §3.1 maps it to job-shop/flow-shop scheduling with
dependencies; §4 therefore proposes the TIC/TAC heuristics). For small graphs
this module finds the optimum exactly, so the heuristics can be measured
against it.

Search space: every recv is ready at time 0 and a channel serves its ready
transfer with the lowest priority number, so a strict order only matters
through the sequence each channel serves. The search therefore fixes channel
0's sequence transfer by transfer, then channel 1's, and so on (no two
interleavings of the same per-channel sequences are both explored). At a
leaf the simulator (:mod:`dlsched.analyses.simulate`) gives the exact makespan.

Pruning: a node's lower bound is the largest of

* each resource's load (TicTac's ``L``),
* the longest dependency path when every transfer finishes as early as the
  partial sequences allow (a placed transfer at its fixed time; a pending one
  no earlier than its channel's placed prefix plus its own time), where an op
  also waits for all the pending transfers it depends on, which its channel
  serves one after another after the prefix (TAC's ``M``, TicTac §4.1),
* on every non-downlink resource, the single-machine bound with release
  dates and tails: ``max_j (r_j + Σ_{r_i ≥ r_j} p_i + min_{r_i ≥ r_j} q_i)``
  over its ops' earliest starts ``r`` and the longest chain of work ``q``
  that must follow each op.

Transfers on one channel that exactly the same ops depend on (a layer's
weight and bias, say) are interchangeable, so only one of their orders is
explored.

A node is cut when its bound reaches the best makespan found so far (seeded
with the canonical, shortest-transfer-first, TAC and TIC orders).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Mapping

from dlsched import limits
from dlsched.dag import RECV, Graph

from .simulate import SimGraph, compile_graph, run_compiled

#: Search nodes between two progress reports.
PROGRESS_EVERY = 1_024


@dataclass
class ExactResult:
    """Outcome of :func:`exact_order`.

    Attributes
    ----------
    priorities : dict
        ``{recv name: priority}``, distinct 0..n−1 (a strict order).
    makespan : float
        Simulated makespan of that order.
    proven : bool
        True when the search finished, so ``makespan`` is the optimum.
    lower_bound : float
        A proven lower bound on the optimal makespan (equals ``makespan``
        when ``proven``).
    explored : int
        Search nodes visited.
    elapsed : float
        Seconds spent searching.
    """

    priorities: dict[str, int]
    makespan: float
    proven: bool
    lower_bound: float
    explored: int
    elapsed: float = 0.0

    @property
    def order(self) -> list[str]:
        return sorted(self.priorities, key=self.priorities.__getitem__)


class _Search:
    def __init__(self, sg: SimGraph, deadline: float | None, progress=None):
        self.sg = sg
        self.deadline = deadline
        self.progress = progress
        n = sg.n
        self.topo = _topological(sg)
        self.pred = [[] for _ in range(n)]
        for i in range(n):
            for j in sg.succ[i]:
                self.pred[j].append(i)
        channels = sorted({sg.res[i] for i in sg.recv_ids})
        self.channels = channels
        self.on_channel = {k: [i for i in sg.recv_ids if sg.res[i] == k] for k in channels}
        self.other_res = sorted(set(range(len(sg.resources))) - set(channels))
        self.by_res = {k: [i for i in range(n) if sg.res[i] == k] for k in self.other_res}
        # deps[i]: bitmask of the recvs op i depends on, directly or transitively
        self.bit = {r: b for b, r in enumerate(sg.recv_ids)}
        self.deps = [0] * n
        for i in self.topo:
            if sg.kinds[i] == RECV:
                self.deps[i] |= 1 << self.bit[i]
            for j in sg.succ[i]:
                self.deps[j] |= self.deps[i]
        self.chan_mask = {k: sum(1 << self.bit[i] for i in self.on_channel[k]) for k in channels}
        self.dep_sum: dict[int, float] = {}
        # Transfers on one channel that exactly the same ops wait for are
        # interchangeable: swapping them changes no other op's ready time.
        dependents: dict[int, int] = {i: 0 for i in sg.recv_ids}
        for i in range(n):
            if sg.kinds[i] != RECV:
                for r in self.recv_of_bits(self.deps[i]):
                    dependents[r] |= 1 << i
        self.twin_class = {i: (sg.res[i], dependents[i]) for i in sg.recv_ids}
        self.inner = [(i, tuple(self.pred[i])) for i in self.topo if sg.kinds[i] != RECV]
        # tail[i]: the longest chain of work after op i finishes (static: recvs are roots)
        self.tail = [0.0] * n
        for i in reversed(self.topo):
            self.tail[i] = max((sg.dur[j] + self.tail[j] for j in sg.succ[i]), default=0.0)
        loads = [0.0] * len(sg.resources)
        for i in range(n):
            loads[sg.res[i]] += sg.dur[i]
        self.load_bound = max(loads, default=0.0)
        self.best = math.inf
        self.best_seq: dict[int, list[int]] | None = None
        self.explored = 0
        self.timed_out = False

    # -- bounds -------------------------------------------------------------
    def lower_bound(self, seqs: dict[int, list[int]]) -> float:
        sg, dur = self.sg, self.sg.dur
        finish = [0.0] * sg.n
        for k in self.channels:
            t = 0.0
            placed = set(seqs.get(k, ()))
            for i in seqs.get(k, ()):
                t += dur[i]
                finish[i] = t
            for i in self.on_channel[k]:
                if i not in placed:
                    finish[i] = t + dur[i]
        release = [0.0] * sg.n
        bound = self.load_bound
        # Pending transfers an op depends on are served one after another after
        # their channel's placed prefix: the op waits at least for all of them.
        waits = []
        for k in self.channels:
            seq = seqs.get(k, ())
            pending = self.chan_mask[k]
            for i in seq:
                pending &= ~(1 << self.bit[i])
            waits.append((sum(dur[i] for i in seq), pending))
        dep_sum = self.dep_sum
        deps = self.deps
        for i, preds in self.inner:
            r = 0.0
            for p in preds:
                if finish[p] > r:
                    r = finish[p]
            d = deps[i]
            for prefix, pending in waits:
                m = d & pending
                if m:
                    w = dep_sum.get(m)
                    if w is None:
                        w = dep_sum[m] = sum(dur[j] for j in self.recv_of_bits(m))
                    if prefix + w > r:
                        r = prefix + w
            release[i] = r
            finish[i] = r + dur[i]
        bound = max(bound, max(finish, default=0.0))
        tails = self.tail
        for k in self.other_res:
            ops = sorted(self.by_res[k], key=release.__getitem__, reverse=True)
            work, q = 0.0, math.inf
            for i in ops:  # latest release first: r_j + work released at or after r_j + least tail among it
                work += dur[i]
                if tails[i] < q:
                    q = tails[i]
                if release[i] + work + q > bound:
                    bound = release[i] + work + q
        return bound

    def recv_of_bits(self, mask: int):
        ids = self.sg.recv_ids
        b = 0
        while mask:
            if mask & 1:
                yield ids[b]
            mask >>= 1
            b += 1

    def leaf(self, seqs: dict[int, list[int]]) -> float:
        rank = list(range(self.sg.n))
        r = 0
        for k in self.channels:
            for i in seqs[k]:
                rank[i] = r
                r += 1
        _, end = run_compiled(self.sg, rank)
        return max(end, default=0.0)

    def offer(self, seqs: dict[int, list[int]]) -> None:
        m = self.leaf(seqs)
        if m < self.best:
            self.best = m
            self.best_seq = {k: list(v) for k, v in seqs.items()}

    # -- depth-first branch and bound ---------------------------------------
    def search(self, seqs: dict[int, list[int]], ci: int) -> None:
        if self.timed_out:
            return
        self.explored += 1
        if self.progress is not None and self.explored % PROGRESS_EVERY == 0:
            self.progress(self.explored, None)  # no total: pruning decides how much of the tree is left
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.timed_out = True
            return
        while ci < len(self.channels) and len(seqs[self.channels[ci]]) == len(self.on_channel[self.channels[ci]]):
            ci += 1
        if ci == len(self.channels):
            self.offer(seqs)
            return
        k = self.channels[ci]
        seq = seqs[k]
        placed = set(seq)
        children = []
        classes_seen = set()
        for i in self.on_channel[k]:
            if i in placed:
                continue
            # interchangeable transfers: only the first unplaced one of a class is tried
            if self.twin_class[i] in classes_seen:
                continue
            classes_seen.add(self.twin_class[i])
            if self.deadline is not None and time.perf_counter() > self.deadline:
                self.timed_out = True
                return
            seq.append(i)
            b = self.lower_bound(seqs)
            seq.pop()
            if b < self.best - 1e-12 * max(1.0, self.best):
                children.append((b, i))
        children.sort()  # most promising first finds good incumbents early
        for b, i in children:
            if b >= self.best - 1e-12 * max(1.0, self.best):
                break
            seq.append(i)
            self.search(seqs, ci)
            seq.pop()
            if self.timed_out:
                return


def _topological(sg: SimGraph) -> list[int]:
    indeg = sg.indeg[:]
    stack = [i for i in range(sg.n) if indeg[i] == 0]
    order = []
    while stack:
        i = stack.pop()
        order.append(i)
        for j in sg.succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    return order


def exact_order(graph: Graph, times: Mapping[str, float], time_limit: float | None = None,
                max_work: int | None = None, progress=None) -> ExactResult:
    """The strict transfer order with the smallest simulated makespan.

    Parameters
    ----------
    graph : Graph
    times : dict
        ``{op name: seconds}`` for every op.
    time_limit : float, optional
        Seconds to search. When given, any graph size is accepted and the best
        order found in time is returned (``proven=False`` if the search did
        not finish).
    max_work : int, optional
        Without a time limit, a search over more candidate orders than this
        (each server's transfers in every order, interchangeable ones counted
        once; :func:`dlsched.limits.exact_work`) is refused, since the search
        is exponential [default: :data:`dlsched.limits.EXACT`].
    progress : callable, optional
        ``progress(explored, None)`` every :data:`PROGRESS_EVERY` search nodes.

    Returns
    -------
    ExactResult

    Raises
    ------
    WorkLimitError
        More candidate orders than ``max_work`` and no ``time_limit``.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(8, 4, seed=3)
    >>> r = exact_order(g, t)
    >>> r.proven, sorted(r.priorities.values())
    (True, [0, 1, 2, 3])

    References
    ----------
    TicTac §3.1 (the problem, NP-hard) and §4 (why heuristics are needed).
    """
    sg = compile_graph(graph, times)
    t0 = time.perf_counter()
    s = _Search(sg, None if time_limit is None else t0 + time_limit, progress)
    if time_limit is None:  # a time limit bounds the search by itself
        limits.check_work(limits.exact_work([[s.twin_class[i] for i in s.on_channel[k]] for k in s.channels]),
                          limits.EXACT, f"the exact order of model {graph.name!r}", max_work,
                          alternative="or pass a time limit (--time-limit SECONDS) to get the best order found "
                                      "within it (the problem is NP-hard, TicTac §3.1), or use --algo tac")
    # Incumbents: canonical order, then shortest transfer first.
    s.offer({k: list(v) for k, v in s.on_channel.items()})
    s.offer({k: sorted(v, key=lambda i: (sg.dur[i], i)) for k, v in s.on_channel.items()})
    for prio in _heuristic_orders(graph, times):
        s.offer({k: sorted(v, key=lambda i: (prio.get(sg.names[i], math.inf), i)) for k, v in s.on_channel.items()})
    root_bound = s.lower_bound({k: [] for k in s.channels})
    if s.best > root_bound + 1e-12 * max(1.0, s.best):
        s.search({k: [] for k in s.channels}, 0)
    proven = not s.timed_out
    order = [i for k in s.channels for i in s.best_seq[k]] if s.best_seq else []
    # Global strict priorities: by the time each transfer starts, channel order on ties.
    start, _ = run_compiled(sg, _rank_of(sg, order))
    seq_pos = {i: q for q, i in enumerate(order)}
    order.sort(key=lambda i: (start[i], s.channels.index(sg.res[i]), seq_pos[i]))
    priorities = {sg.names[i]: p for p, i in enumerate(order)}
    best = s.best if math.isfinite(s.best) else 0.0
    return ExactResult(priorities, best, proven, best if proven else min(root_bound, best), s.explored,
                       time.perf_counter() - t0)


def _heuristic_orders(graph: Graph, times: Mapping[str, float]):
    """TAC and TIC orders as starting incumbents (good ones prune more)."""
    try:
        from .tac import tac_order
        from .tic import tic_order
    except ImportError:  # the heuristics are optional here
        return []
    return [tac_order(graph, times), tic_order(graph)]


def _rank_of(sg: SimGraph, order: list[int]) -> list[int]:
    rank = list(range(sg.n))
    for r, i in enumerate(order):
        rank[i] = r
    return rank
