"""A worker's compute cut at its waits, each piece set against the profile (issue 33's diagnosis, DESIGN §4.7).

The in-situ oracle gives each op a share of the step and the calibration a
level; the simulator then runs every op at that level wherever it falls. On a
2-core machine beside a busy loop, TAC computed longer after its last
parameter arrived than the simulator said and shorter before it, with the
same busy time per step (``docs/validate.md``). This module measures where
the compute runs slow: it cuts each worker's iteration at the waits that
blocked it (:attr:`~dlsched.timeline.IterationRecord.stalls`) and sets each
piece's wall time against the profile's time of the ops it ran.

Which ops a piece ran follows from the arrivals: the worker runs the compute
ops in the graph's topological order (the order the capture recorded them
in, which is the order the framework runs a forward), and a wait that began
at ``a`` blocked the first op, from where the worker stood, one of whose
parameters arrived after ``a``. Backward has no waits, so it is all in the
last piece.

Examples
--------
>>> from dlsched.dag import COMPUTE, RECV, Graph
>>> from dlsched.timeline import IterationRecord
>>> g = Graph("two")
>>> for name, kind in [("w1", RECV), ("w2", RECV), ("a", COMPUTE), ("b", COMPUTE)]:
...     _ = g.add_op(name, kind)
>>> for u, v in [("w1", "a"), ("w2", "b"), ("a", "b")]:
...     g.add_edge(u, v)
>>> r = IterationRecord(0, 0, 0.0, 0.1, 1.0, arrivals={"w1": 0.1, "w2": 0.5}, compute_end=0.8,
...                     stalls=[[0.3, 0.5]])
>>> [(s.first, s.stop, round(s.wall, 3), s.last) for s in segments(g, {"a": 0.1, "b": 0.2}, r)]
[(0, 1, 0.2, False), (1, 2, 0.3, True)]
>>> {k: round(v, 3) for k, v in slowdowns(g, {"a": 0.1, "b": 0.2}, [r]).items()}
{'between_waits': 2.0, 'after_last_wait': 1.5, 'between_work_s': 0.1, 'after_work_s': 0.2, 'pieces_between': 1}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.timeline import IterationRecord, compute_spans

#: slack (seconds) between a wait's start and the arrival it waited for
MIN_WAIT = 1e-4


@dataclass(frozen=True)
class Segment:
    """One piece of a worker's compute between two waits: the ops ``[first, stop)`` of the compute order,
    their profiled seconds ``work``, its ``wall`` seconds, and whether it came after the last wait."""

    first: int
    stop: int
    work: float
    wall: float
    last: bool


def segments(graph: Graph, times: Mapping[str, float], record: IterationRecord) -> list[Segment]:
    """``record``'s compute cut at its waits (module docstring); pieces that ran no op are left out."""
    return _cut(_Order(graph, times), record)


class _Order:
    """What every record's cut shares: the compute order, each op's position, the parameters it needs, and
    the profiled seconds before each position."""

    def __init__(self, graph: Graph, times: Mapping[str, float]):
        self.ops = [op.name for op in graph.topological_order() if op.kind == COMPUTE]
        pos = {n: i for i, n in enumerate(self.ops)}
        self.needs: list[list[str]] = [[] for _ in self.ops]
        for op in graph.of_kind(RECV):
            for s in graph.successors(op.name):
                if s in pos:
                    self.needs[pos[s]].append(op.param or op.name)
        self.cum = [0.0]
        for n in self.ops:
            self.cum.append(self.cum[-1] + float(times[n]))


def _cut(order: _Order, record: IterationRecord) -> list[Segment]:
    n = len(order.ops)
    arrived = [max((record.arrivals.get(p, float("-inf")) for p in ps), default=float("-inf")) for ps in order.needs]
    spans = compute_spans(record)
    if not spans:
        return []
    starts, at = [(spans[0][0], 0)], 0
    for (_, wait), (resumed, _) in zip(spans, spans[1:]):  # the worker waited from ``wait`` to ``resumed``
        blocked = next((i for i in range(at, n) if arrived[i] > wait - MIN_WAIT), None)
        if blocked is None:
            break
        starts.append((resumed, blocked))
        at = blocked
    end = record.compute_end if record.compute_end is not None else record.end
    out = []
    for k, (t0, first) in enumerate(starts):
        last = k == len(starts) - 1
        stop = n if last else starts[k + 1][1]
        if stop > first:
            out.append(Segment(first, stop, order.cum[stop] - order.cum[first], (end if last else spans[k][1]) - t0,
                               last))
    return out


def slowdowns(graph: Graph, times: Mapping[str, float], records: Iterable[IterationRecord]) -> dict:
    """Wall time over profiled time of the compute between waits and after the last wait, over ``records``:
    ``between_waits`` and ``after_last_wait`` (``None`` where no op ran there), the profiled seconds each
    covers, and the number of pieces between waits (the module's example).
    """
    acc = {True: [0.0, 0.0], False: [0.0, 0.0]}
    pieces = 0
    order = _Order(graph, times)
    for r in records:
        for s in _cut(order, r):
            acc[s.last][0] += s.wall
            acc[s.last][1] += s.work
            pieces += not s.last

    def ratio(last: bool) -> float | None:
        wall, work = acc[last]
        return wall / work if work > 0 else None
    return {"between_waits": ratio(False), "after_last_wait": ratio(True), "between_work_s": acc[False][1],
            "after_work_s": acc[True][1], "pieces_between": pieces}
