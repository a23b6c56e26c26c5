"""Chrome-trace JSON of a simulated timeline (opens in Perfetto or chrome://tracing).

Layout: one process per worker, one thread per resource of that worker
(``compute:0``, and each ``ps:K/down`` / ``ps:K/up`` link). With several
workers the links are shared, so they get their own process
(``parameter-server links``) whose threads show every worker's transfers.
Every op is a complete event (``ph: "X"``) with ``ts``/``dur`` in
microseconds; ``args`` carry its kind, worker, resource, priority and iteration (when known).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from dlsched.atomic import atomic_write_text


def _resource_key(r: str):
    return (not r.startswith("compute"), r)


def chrome_trace(frame, model: str | None = None, metadata: dict | None = None) -> dict:
    """Build the trace document from a timeline DataFrame.

    Parameters
    ----------
    frame : pandas.DataFrame
        Columns ``op``, ``kind``, ``resource``, ``start``, ``end`` (seconds),
        optionally ``priority``, ``worker`` and ``iteration`` (as from
        :meth:`dlsched.analyses.simulate.Schedule.frame` or a multi-worker
        timeline).
    model : str, optional
        Shown as the trace's process names and in ``metadata``.
    metadata : dict, optional
        Stored under ``otherData`` (makespan, order, …).

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``.

    Examples
    --------
    >>> import pandas as pd
    >>> f = pd.DataFrame({"op": ["p0", "f0"], "kind": ["recv", "compute"],
    ...                   "resource": ["ps:0/down", "compute:0"], "start": [0.0, 0.001], "end": [0.001, 0.003]})
    >>> doc = chrome_trace(f)
    >>> [e["dur"] for e in doc["traceEvents"] if e["ph"] == "X"]
    [1000.0, 2000.0]
    """
    has_worker = "worker" in frame.columns
    workers = sorted(int(w) for w in frame["worker"].unique()) if has_worker else [0]
    multi = len(workers) > 1
    link_pid = (max(workers) + 1) if multi else None
    events: list[dict] = []
    tids: dict[tuple[int, str], int] = {}
    label = f"{model} " if model else ""
    for w in workers:
        events.append({"ph": "M", "name": "process_name", "pid": w, "tid": 0,
                       "args": {"name": f"{label}worker {w}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": w, "tid": 0, "args": {"sort_index": w}})
    if multi:
        events.append({"ph": "M", "name": "process_name", "pid": link_pid, "tid": 0,
                       "args": {"name": "parameter-server links (shared)"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": link_pid, "tid": 0,
                       "args": {"sort_index": link_pid}})

    def where(worker: int, resource: str) -> tuple[int, int]:
        pid = link_pid if multi and not resource.startswith("compute") else worker
        key = (pid, resource)
        if key not in tids:
            tid = 1 + sum(1 for p, _ in tids if p == pid)
            tids[key] = tid
        return pid, tids[key]

    # Assign thread ids in a stable, readable order: compute first, then links.
    for w in workers:
        sub = frame[frame["worker"] == w] if has_worker else frame
        for r in sorted(sub["resource"].unique(), key=_resource_key):
            where(w, r)
    for (pid, resource), tid in tids.items():
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": resource}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    cols = ["op", "kind", "resource", "start", "end"]
    prio = frame["priority"].tolist() if "priority" in frame.columns else [math.nan] * len(frame)
    wk = frame["worker"].tolist() if has_worker else [0] * len(frame)
    its = frame["iteration"].tolist() if "iteration" in frame.columns else [None] * len(frame)
    for (op, kind, resource, start, end), p, w, it in zip(frame[cols].itertuples(index=False, name=None), prio, wk,
                                                         its):
        pid, tid = where(int(w), resource)
        args = {"kind": kind, "worker": int(w), "resource": resource}
        if p == p and p is not None:  # not NaN
            args["priority"] = int(p)
        if it is not None:
            args["iteration"] = int(it)
        events.append({
            "ph": "X", "name": f"w{int(w)}:{op}" if multi and pid == link_pid else str(op), "cat": kind,
            "pid": pid, "tid": tid, "ts": round(float(start) * 1e6, 3),
            "dur": round(float(end - start) * 1e6, 3), "args": args,
        })
    other = {"generator": "dlsched simulate"}
    if model:
        other["model"] = model
    other.update(metadata or {})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_chrome_trace(frame, path: str | Path, model: str | None = None, metadata: dict | None = None) -> None:
    """Write :func:`chrome_trace` to ``path`` atomically."""
    doc = chrome_trace(frame, model, metadata)
    atomic_write_text(path, json.dumps(doc, default=_plain) + "\n")


def _plain(x):
    if hasattr(x, "item"):
        return x.item()
    return str(x)
