"""The peak of a profiled stretch on CPU, from ``torch.profiler``'s memory events (issue 30).

``torch.profiler(profile_memory=True)`` records a ``[memory]`` event for each
allocation and free the CPU allocator reports while profiling is on *in the
thread that makes it*: ``Bytes`` (negative for a free), ``Addr`` and "Total
Allocated", a running count kept by the allocator. Two things make that
count a poor peak (measured on FSDP2 with gloo, torch 2.13, 2 processes,
``docs/validate-fsdp.md``):

- it outlives a profiling session: a block allocated while one session
  profiles and freed after it is never taken off, so a later session starts
  from the leftovers (10 to 30 MiB a profiled step on ``vgg_mid``). So the
  peak here is the running sum of this stretch's own ``Bytes``;
- a collective's own working copy (gloo's reduce-scatter clones its input
  inside ``c10d::_reduce_scatter_base_``) is released by whichever thread
  drops the last reference to the collective's work, the caller or gloo's
  worker. When it is the worker, nothing records the free, and the count
  keeps the copy for the rest of the step: in 24 profiled steps of one
  schedule, the steps whose copies' frees went unrecorded read 10 to 35 MiB
  higher than the rest. So a block allocated inside a ``c10d::`` op on the
  caller's thread, whose free the stretch never records, is taken as freed
  when that op returns, as it is in the steps where the free is recorded.

A block whose address is allocated again before any recorded free must
have been freed in between; it is taken off there.

Examples
--------
>>> mem = lambda ts, b, a: {"name": "[memory]", "ph": "i", "ts": ts, "tid": 1, "args": {"Bytes": b, "Addr": a}}
>>> op = {"name": "c10d::_reduce_scatter_base_", "ph": "X", "ts": 10, "dur": 5, "tid": 1}
>>> events = [mem(1, 100, 7), op, mem(11, 40, 8), mem(20, 30, 9), mem(21, -100, 7)]
>>> allocated_during(events)   # the copy at address 8 is taken off when the op returns, at 15
140.0
"""
from __future__ import annotations

from typing import Iterable, Mapping


def allocated_during(events: Iterable[Mapping]) -> float:
    """The most the stretch held at once beyond what it began with, in bytes (module docstring)."""
    events = list(events)
    mem = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e.get("ts", 0))
    collectives: dict = {}
    for e in events:
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("c10d::"):
            collectives.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e.get("dur", 0)))
    deltas: list[tuple[float, float]] = []
    live: dict = {}  # address -> (bytes, the allocation event)
    for e in mem:
        nbytes, addr = float(e["args"].get("Bytes", 0)), e["args"].get("Addr")
        if nbytes > 0:
            if addr in live:  # allocated again: its earlier block was freed unseen
                deltas.append((e["ts"], -live.pop(addr)[0]))
            live[addr] = (nbytes, e)
        elif addr in live:
            live.pop(addr)
        deltas.append((e["ts"], nbytes))
    for nbytes, e in live.values():
        inside = [end for start, end in collectives.get(e.get("tid"), ()) if start <= e["ts"] <= end]
        if inside:
            deltas.append((min(inside), -nbytes))
    held = peak = 0.0
    for _, d in sorted(deltas, key=lambda x: (x[0], x[1] > 0)):
        held += d
        peak = max(peak, held)
    return peak
