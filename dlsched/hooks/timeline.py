"""Timestamps recorded by the enforcement hooks, read by tests and the benchmark.

All times are ``time.perf_counter()`` seconds, which on Linux is CLOCK_MONOTONIC:
one clock shared by every process on the machine (network namespaces included),
so times from different ranks can be compared directly.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class IterationRecord:
    """One worker's view of one iteration.

    ``arrivals`` maps each parameter name to the time its transfer completed on
    the worker; ``server_of`` maps it to the server rank index that sent it.
    """

    worker: int
    iteration: int
    start: float
    compute_start: float
    end: float
    arrivals: dict[str, float] = field(default_factory=dict)
    server_of: dict[str, int] = field(default_factory=dict)
    sent_order: dict[int, list[str]] = field(default_factory=dict)

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

    def iteration_spans(self, skip: int = 0) -> list[dict]:
        """Per iteration: start (earliest worker start), end (latest worker end), and
        each worker's own makespan ``m_i`` (its end minus the common start)."""
        out = []
        for it in self.iterations[skip:]:
            rs = [r for r in self.records if r.iteration == it]
            start = min(r.start for r in rs)
            out.append({"iteration": it, "start": start, "end": max(r.end for r in rs),
                        "makespans": {r.worker: r.end - start for r in rs}})
        return out

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
        from dlsched.exporters.atomic import atomic_write_text
        atomic_write_text(path, json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> Timeline:
        return cls.from_dict(json.loads(Path(path).read_text()))
