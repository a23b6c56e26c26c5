"""Timestamps recorded by the enforcement hooks, read by tests and the benchmark.

All times are ``time.perf_counter()`` seconds, which on Linux is CLOCK_MONOTONIC:
one clock shared by every process on the machine (network namespaces included),
so times from different ranks can be compared directly.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dlsched.atomic import atomic_write_text


@dataclass
class IterationRecord:
    """One worker's view of one iteration.

    ``arrivals`` maps each parameter name to the time its transfer completed on
    the worker; ``server_of`` maps it to the server rank index that sent it.
    ``sent`` maps it to the time its server posted the send (the transfer's
    start; filled in from the servers' records by :meth:`Timeline.add_sent`),
    ``compute_end`` is when the forward (inference) or backward (training)
    returned, ``stalls`` the ``[start, end]`` of each wait for a parameter
    that blocked the compute, and ``grad_sends`` maps each parameter to the ``[start, end]``
    of its gradient's send (post, and completion on the worker).
    """

    worker: int
    iteration: int
    start: float
    compute_start: float
    end: float
    arrivals: dict[str, float] = field(default_factory=dict)
    server_of: dict[str, int] = field(default_factory=dict)
    sent_order: dict[int, list[str]] = field(default_factory=dict)
    compute_end: float | None = None
    sent: dict[str, float] = field(default_factory=dict)
    grad_sends: dict[str, list[float]] = field(default_factory=dict)
    stalls: list[list[float]] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def arrival_order(self, server: int | None = None) -> list[str]:
        """Parameter names in arrival order (only those from ``server`` if given)."""
        names = [n for n in self.arrivals if server is None or self.server_of.get(n) == server]
        return sorted(names, key=lambda n: self.arrivals[n])

    @property
    def last_arrival(self) -> float:
        return max(self.arrivals.values())


def compute_spans(r: IterationRecord) -> list[tuple[float, float]]:
    """The intervals a worker computed in: compute start to end, less the waits that blocked it.

    Examples
    --------
    >>> compute_spans(IterationRecord(0, 0, 0.0, 1.0, 5.0, compute_end=4.0, stalls=[[0.5, 1.0], [2.0, 2.5]]))
    [(1.0, 2.0), (2.5, 4.0)]
    """
    end = r.compute_end if r.compute_end is not None else r.end
    spans, t = [], r.compute_start
    for a, b in sorted(r.stalls):
        if b <= t or a >= end:
            continue
        if a > t:
            spans.append((t, a))
        t = max(t, b)
    if end > t:
        spans.append((t, end))
    return spans


@dataclass
class Timeline:
    """All iteration records of a parameter-server run."""

    records: list[IterationRecord] = field(default_factory=list)

    def get(self, worker: int, iteration: int) -> IterationRecord:
        for r in self.records:
            if r.worker == worker and r.iteration == iteration:
                return r
        raise KeyError((worker, iteration))

    @property
    def workers(self) -> list[int]:
        return sorted({r.worker for r in self.records})

    @property
    def iterations(self) -> list[int]:
        return sorted({r.iteration for r in self.records})

    def by_iteration(self) -> dict[int, list[IterationRecord]]:
        """Each iteration's records, by worker, iterations in order.

        Examples
        --------
        >>> t = Timeline([IterationRecord(1, 0, 0, 0, 1), IterationRecord(0, 0, 0, 0, 1),
        ...               IterationRecord(0, 1, 1, 1, 2)])
        >>> {it: [r.worker for r in rs] for it, rs in t.by_iteration().items()}
        {0: [0, 1], 1: [0]}
        """
        groups: dict[int, list[IterationRecord]] = {}
        for r in sorted(self.records, key=lambda r: (r.iteration, r.worker)):
            groups.setdefault(r.iteration, []).append(r)
        return groups

    def iteration_spans(self, skip: int = 0) -> list[dict]:
        """Per iteration: start, end (the latest worker's end), and each worker's makespan ``m_i`` from that start.

        An iteration starts when the previous one ended: the server sends
        nothing of iteration ``k`` before the last worker finished ``k − 1``, so
        a worker that finished early and waits is still in ``k − 1``'s
        straggling, not in ``k``. The spans tile the run, and their mean is
        the wall time per iteration. Starting a span at the earliest worker's
        start instead would count that wait twice. The first recorded
        iteration starts at its earliest worker's start.

        Examples
        --------
        >>> t = Timeline([IterationRecord(0, 0, 0.0, 0.1, 1.0), IterationRecord(1, 0, 0.0, 0.1, 1.4),
        ...               IterationRecord(0, 1, 1.0, 1.5, 2.2), IterationRecord(1, 1, 1.4, 1.5, 2.0)])
        >>> [(s["start"], s["end"]) for s in t.iteration_spans()]
        [(0.0, 1.4), (1.4, 2.2)]
        """
        out, prev_end = [], None
        for it in self.iterations:
            rs = [r for r in self.records if r.iteration == it]
            start = min(r.start for r in rs) if prev_end is None else prev_end
            end = max(r.end for r in rs)
            out.append({"iteration": it, "start": start, "end": end,
                        "makespans": {r.worker: r.end - start for r in rs}})
            prev_end = end
        return out[skip:]

    def add_sent(self, sent: list[dict]) -> None:
        """Merge a server's send records ``[{"worker", "iteration", "times": {name: t}}]`` into the records."""
        for doc in sent:
            self.get(int(doc["worker"]), int(doc["iteration"])).sent.update(doc["times"])

    def frame(self, skip: int = 0):
        """Every recorded op as rows ``worker, iteration, op, kind, resource, start, end, priority``.

        The schema of a simulated timeline (:func:`dlsched.formats.chrome_trace.chrome_trace`
        writes both): parameter transfers are ``recv`` on ``ps:K/down`` from the
        server's send to the arrival, gradient sends ``send`` (``NAME/grad``) on
        ``ps:K/up``, and each iteration's compute the ``compute`` ops
        (``iteration N``) on ``compute:0`` between the waits that blocked it. ``priority`` is the transfer's place in
        its server's send order. Times are seconds since the first kept
        iteration's start. Iterations before ``skip`` (warm-up) are left out.

        Examples
        --------
        >>> r = IterationRecord(0, 0, 1.0, 1.1, 1.5, {"a": 1.1}, {"a": 0}, {0: ["a"]}, 1.4, {"a": 1.0},
        ...                     {"a": [1.3, 1.45]})
        >>> Timeline([r]).frame()[["op", "kind", "resource", "start", "end"]].round(3).values.tolist()
        [['a', 'recv', 'ps:0/down', 0.0, 0.1], ['iteration 0', 'compute', 'compute:0', 0.1, 0.4], ['a/grad', 'send', 'ps:0/up', 0.3, 0.45]]
        """
        import pandas as pd
        keep = set(self.iterations[skip:])
        recs = [r for r in self.records if r.iteration in keep]
        if not recs:
            return pd.DataFrame(columns=["worker", "iteration", "op", "kind", "resource", "start", "end", "priority"])
        t0 = min(r.start for r in recs)
        rows = []
        for r in recs:
            rank = {n: i for order in r.sent_order.values() for i, n in enumerate(order)}
            for n, t in r.arrivals.items():
                s = r.server_of.get(n, 0)
                rows.append((r.worker, r.iteration, n, "recv", f"ps:{s}/down", r.sent.get(n, r.start) - t0,
                             t - t0, rank.get(n)))
            for a, b in compute_spans(r):
                rows.append((r.worker, r.iteration, f"iteration {r.iteration}", "compute", "compute:0", a - t0,
                             b - t0, None))
            for n, (a, b) in r.grad_sends.items():
                rows.append((r.worker, r.iteration, f"{n}/grad", "send", f"ps:{r.server_of.get(n, 0)}/up",
                             a - t0, b - t0, None))
        return pd.DataFrame(rows, columns=["worker", "iteration", "op", "kind", "resource", "start", "end",
                                           "priority"])

    def to_dict(self) -> dict:
        return {"records": [asdict(r) for r in self.records]}

    @classmethod
    def from_dict(cls, doc: dict) -> Timeline:
        recs = []
        for r in doc["records"]:
            r = dict(r)
            r["sent_order"] = {int(k): v for k, v in r.get("sent_order", {}).items()}
            recs.append(IterationRecord(**r))
        return cls(recs)

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> Timeline:
        return cls.from_dict(json.loads(Path(path).read_text()))
