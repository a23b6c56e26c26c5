"""Two resources, one op at a time each: the event loop the data-parallel step simulators share (DESIGN §4.8).

A :class:`LaneDag` holds nodes on the **compute** lane (forward, backward,
the process's own hooks), on the **link** (one collective at a time) or
instant (a join). :meth:`LaneDag.run` is TicTac's non-idling list schedule
(§3.1): each lane runs one node at a time, never preempts and never idles
while it has a ready node; it takes ready nodes first-ready-first, hooks
before graph ops, then insertion order. With contention (a CPU collective's
reductions and socket copies share the cores with compute) each lane runs
slower while the other is busy too: :meth:`LaneDag.run`'s ``slow``.

Used by :mod:`.ddp_step` (DDP and the ordered all-reduce) and
:mod:`.fsdp_step` (FSDP2).
"""
from __future__ import annotations

import heapq
from typing import Sequence

from dlsched.errors import DlschedError

COMPUTE_LANE, LINK_LANE, INSTANT = 0, 1, -1


class LaneDag:
    """An unrolled step: nodes on the compute resource, the link, or instant; run by :meth:`run`."""

    def __init__(self):
        self.dur: list[float] = []
        self.lane: list[int] = []
        self.cls: list[int] = []
        self.succ: list[list[int]] = []
        self.indeg: list[int] = []

    def add(self, dur: float, lane: int, preds: Sequence[int] = (), hook: bool = False) -> int:
        i = len(self.dur)
        self.dur.append(float(dur))
        self.lane.append(lane)
        self.cls.append(0 if hook else 1)
        self.succ.append([])
        self.indeg.append(0)
        for p in preds:
            self.edge(p, i)
        return i

    def edge(self, u: int, v: int) -> None:
        self.succ[u].append(v)
        self.indeg[v] += 1

    def run(self, slow: tuple[float, float] = (1.0, 1.0)) -> tuple[list[float], list[float], list[float]]:
        """(ready, start, end) of every node: the non-idling list schedule of the module docstring.

        ``slow``: (compute beside the link, link beside compute) of :class:`HostCosts`; with contention each
        running node advances at ``1/slow`` of its rate while the other lane is busy too."""
        if slow != (1.0, 1.0):
            return self._run_shared(slow)
        st = _Schedule(self)
        busy = {COMPUTE_LANE: False, LINK_LANE: False}
        events: list[tuple[float, int]] = []
        now = 0.0
        while st.done < len(self.dur):
            for lane, q in st.queues.items():
                if not busy[lane] and q:
                    _, _, i = heapq.heappop(q)
                    st.start[i] = max(now, st.ready[i])
                    st.end[i] = st.start[i] + self.dur[i]
                    busy[lane] = True
                    heapq.heappush(events, (st.end[i], i))
            if not events:
                raise DlschedError("the step's unrolled DAG has a cycle")  # cannot happen: built acyclic
            now = events[0][0]
            freed: list[int] = []
            while events and events[0][0] <= now:
                _, i = heapq.heappop(events)
                busy[self.lane[i]] = False
                st.done += 1
                freed.extend(st.release(i))
            st.settle(freed[::-1])
        return st.ready, st.start, st.end

    def _run_shared(self, slow: tuple[float, float]) -> tuple[list[float], list[float], list[float]]:
        """:meth:`run` with the lanes slowing each other: a node's work is its duration alone; while both
        lanes run, the compute node does ``1/slow[0]`` of a second's work per second, the link ``1/slow[1]``."""
        st = _Schedule(self)
        running: dict[int, list] = {}  # lane -> [node, work left]
        now = 0.0
        while st.done < len(self.dur):
            for lane, q in st.queues.items():
                if lane not in running and q:  # queued nodes are ready: their predecessors are done
                    _, _, i = heapq.heappop(q)
                    st.start[i] = now
                    running[lane] = [i, self.dur[i]]
            if not running:
                raise DlschedError("the step's unrolled DAG has a cycle")  # cannot happen: built acyclic
            both = len(running) == 2
            rate = {lane: 1.0 / (slow[0 if lane == COMPUTE_LANE else 1] if both else 1.0) for lane in running}
            step = min(left / rate[lane] for lane, (_, left) in running.items())
            now += step
            freed: list[int] = []
            for lane in list(running):
                i, left = running[lane]
                left -= step * rate[lane]
                if left <= 1e-12 * max(1.0, self.dur[i]):
                    st.end[i] = now
                    del running[lane]
                    st.done += 1
                    freed.extend(st.release(i))
                else:
                    running[lane][1] = left
            st.settle(freed[::-1])
        return st.ready, st.start, st.end


class _Schedule:
    """The bookkeeping both event loops of :class:`LaneDag` share: times, in-degrees, the lanes' ready queues."""

    def __init__(self, dag: LaneDag):
        n = len(dag.dur)
        self.dag, self.indeg = dag, list(dag.indeg)
        self.ready, self.start, self.end = [0.0] * n, [0.0] * n, [0.0] * n
        self.queues: dict[int, list] = {COMPUTE_LANE: [], LINK_LANE: []}
        self.done = 0
        self.settle([i for i in range(n) if self.indeg[i] == 0][::-1])

    def release(self, u: int) -> list[int]:
        """``u`` ended: its successors' ready times, and those now free of predecessors."""
        free = []
        for v in self.dag.succ[u]:
            self.ready[v] = max(self.ready[v], self.end[u])
            self.indeg[v] -= 1
            if self.indeg[v] == 0:
                free.append(v)
        return free

    def settle(self, stack: list[int]) -> None:
        """Queue the nodes whose predecessors are all done; instant ones end at once."""
        dag = self.dag
        while stack:
            u = stack.pop()
            if dag.lane[u] != INSTANT:
                heapq.heappush(self.queues[dag.lane[u]], (self.ready[u], dag.cls[u], u))
                continue
            self.start[u] = self.end[u] = self.ready[u]
            self.done += 1
            stack.extend(self.release(u))
