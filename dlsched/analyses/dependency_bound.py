"""A lower bound on one worker's makespan that respects the dependencies.

TicTac's ``L`` (:func:`dlsched.analyses.bounds.bounds`) keeps the busiest
resource always busy, as if downloads, compute and uploads could all overlap.
In training they cannot: the sends need the backward, which needs the recvs.
On a model whose transfers and compute are of the same size, ``L`` is then far
below anything a schedule can reach, and TicTac's efficiency ``E`` reads as a
bad order where no order can do better.

This bound relaxes each resource to one machine with heads and tails (Carlier,
1982): an op cannot start before its *head*, nor can the iteration end less
than its *tail* after it finishes. Heads and tails come from the dependencies:

- the longest path of ops before (after) it, each op starting no earlier than
  its own head;
- for every link, the summed time of the recvs it depends on (the sends that
  depend on it): those share one link, so they go one after another.

On one machine with heads and tails, Jackson's preemptive schedule (run the
available op with the longest tail, preempting on each arrival) is optimal for
``max(finish + tail)`` when preemption is allowed, so it bounds every real
schedule from below. The bound is the largest over the resources; it is at
least the critical path and at least ``L``, and never more than the makespan
of any order (tested against the simulator on random DAGs).

Examples
--------
Download, compute, upload in a chain, one second each: ``L`` says 1 s, no
schedule beats 3 s.

>>> from dlsched.dag import Graph, RECV, COMPUTE, SEND
>>> g = Graph("chain", "training")
>>> _ = g.add_op("w", RECV); _ = g.add_op("f", COMPUTE); _ = g.add_op("w/grad", SEND, param="w")
>>> g.add_edge("w", "f"); g.add_edge("f", "w/grad")
>>> b = dependency_bound(g, {"w": 1.0, "f": 1.0, "w/grad": 1.0})
>>> b.lower, b.resource
(3.0, 'compute:0')

References
----------
J. Carlier, "The one-machine sequencing problem", European Journal of
Operational Research 11 (1982) 42–47. J. R. Jackson, "Scheduling a production
line to minimize maximum tardiness", 1955.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Mapping

from dlsched.dag import RECV, SEND, Graph


@dataclass(frozen=True)
class DependencyBound:
    """The bound and what it rests on.

    Attributes
    ----------
    lower : float
        Seconds no schedule of the iteration can beat.
    resource : str
        The resource whose one-machine relaxation gives it.
    critical_path : float
        The longest path of op times (one of the bound's ingredients).
    per_resource : dict
        Resource → its one-machine bound.
    """

    lower: float
    resource: str
    critical_path: float
    per_resource: dict = field(default_factory=dict)


def jackson_preemptive(heads: list[float], durations: list[float], tails: list[float]) -> float:
    """The optimal ``max(finish + tail)`` of jobs on one machine when preemption is allowed.

    Jackson's preemptive schedule: at every moment run the released job with
    the longest tail; a newly released job with a longer tail preempts.

    Examples
    --------
    >>> jackson_preemptive([0, 0], [1, 1], [0, 5])  # the long-tailed job first: 1 + 5
    6.0
    >>> jackson_preemptive([0, 2], [4, 1], [0, 10])  # preempted at 2 for the tail of 10
    13.0
    """
    heads, durations, tails = ([float(x) for x in v] for v in (heads, durations, tails))
    jobs = sorted(range(len(heads)), key=lambda j: heads[j])
    ready: list[tuple[float, int, float]] = []  # (-tail, job, remaining)
    t, best, k = 0.0, 0.0, 0
    while k < len(jobs) or ready:
        if not ready and heads[jobs[k]] > t:
            t = heads[jobs[k]]
        while k < len(jobs) and heads[jobs[k]] <= t:
            j = jobs[k]
            heapq.heappush(ready, (-tails[j], j, durations[j]))
            k += 1
        neg_tail, j, left = heapq.heappop(ready)
        until = heads[jobs[k]] if k < len(jobs) else float("inf")
        if t + left <= until:
            t += left
            best = max(best, t - neg_tail)
        else:  # run to the next release, then choose again
            heapq.heappush(ready, (neg_tail, j, left - (until - t)))
            t = until
    return best


def _order(succ: list[list[int]], n: int) -> list[int]:
    indeg = [0] * n
    for out in succ:
        for j in out:
            indeg[j] += 1
    order = [i for i in range(n) if indeg[i] == 0]
    for i in order:  # grows while iterating: Kahn's algorithm
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                order.append(j)
    return order


def _link_sums(order, preds_or_succ, members: list[int], res: list[int], dur: list[float], n: int) -> list[float]:
    """Per op: the largest, over links, of the summed time of the ``members`` it reaches through ``preds_or_succ``."""
    bit = {m: 1 << b for b, m in enumerate(members)}
    reach = [0] * n
    for i in order:
        r = 0
        for p in preds_or_succ[i]:
            r |= reach[p] | bit.get(p, 0)
        reach[i] = r
    out = [0.0] * n
    for i in range(n):
        r, per = reach[i], {}
        while r:
            low = r & -r
            m = members[low.bit_length() - 1]
            per[res[m]] = per.get(res[m], 0.0) + dur[m]
            r ^= low
        out[i] = max(per.values(), default=0.0)
    return out


def dependency_bound(graph: Graph, times: Mapping[str, float]) -> DependencyBound:
    """The dependency-aware lower bound on one worker's makespan (see the module docstring).

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → seconds for every op.

    Returns
    -------
    DependencyBound

    Raises
    ------
    OracleError
        ``times`` misses an op or holds a bad value.

    See Also
    --------
    dlsched.analyses.bounds.bounds : TicTac's ``U`` and ``L``, which ignore the dependencies.
    """
    from .simulate import compile_graph

    sg = compile_graph(graph, times)
    n, dur, res = sg.n, sg.dur, sg.res
    preds: list[list[int]] = [[] for _ in range(n)]
    for i, out in enumerate(sg.succ):
        for j in out:
            preds[j].append(i)
    order = _order(sg.succ, n)
    recvs = [i for i in range(n) if sg.kinds[i] == RECV]
    sends = [i for i in range(n) if sg.kinds[i] == SEND]
    head = _link_sums(order, preds, recvs, res, dur, n)
    tail = _link_sums(order[::-1], sg.succ, sends, res, dur, n)
    for i in order:
        head[i] = max([head[i]] + [head[p] + dur[p] for p in preds[i]])
    for i in reversed(order):
        tail[i] = max([tail[i]] + [tail[s] + dur[s] for s in sg.succ[i]])
    longest = [0.0] * n  # plain critical path, reported beside the bound
    for i in order:
        longest[i] = dur[i] + max((longest[p] for p in preds[i]), default=0.0)
    per: dict[str, float] = {}
    for k, name in enumerate(sg.resources):
        on = [i for i in range(n) if res[i] == k]
        if on:
            per[name] = jackson_preemptive([head[i] for i in on], [dur[i] for i in on], [tail[i] for i in on])
    resource = max(per, key=per.get, default="")
    return DependencyBound(per.get(resource, 0.0), resource, max(longest, default=0.0), per)
