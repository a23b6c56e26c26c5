"""Where one rank's step time goes: compute, communication, their overlap, memory, idle.

A data-parallel step is fast when its collectives hide behind compute. The
figures that say whether they do are lengths of unions of busy intervals
(:mod:`~dlsched.analyses.intervals`), per ``ProfilerStep`` and over the
whole trace:

- **compute** C: the union of compute-kernel intervals, all streams together;
- **communication** M: the union of communication (NCCL/RCCL) kernels;
- **overlap** = |C ∩ M|, and **exposed communication** = |M \\ C|, the part
  of the collectives that nothing hides;
- **memory** Y: the union of memcpy/memset intervals, and **memory only**
  = |Y \\ (C ∪ M)|;
- **idle** = span − |C ∪ M ∪ Y|: no device work at all.

These partition the step exactly::

    span = compute + exposed communication + memory only + idle

A step's span is its host ``ProfilerStep#N`` annotation; device work is
counted in the step whose span it falls in (clipped at the edges), so a
kernel queued at the end of step N and run after it ends counts in step N+1.

A CPU-only trace (gloo) has no device events (``mode == "host"``). There
communication is the union of the host's collective record functions
(``gloo:all_reduce`` on gloo's worker threads, ``c10d::allreduce_``…,
:func:`~dlsched.profiling.kineto_events.is_host_collective`), and compute the
union over threads of each thread's host ops (``cpu_op``, ``user_annotation``)
outside the collectives on that same thread: a thread blocked in a collective
is not computing, while gloo's worker threads running beside the main thread
are real overlap. These are the resources the bounds of a measured step rate
(:mod:`~dlsched.analyses.trace_bounds`), so the two agree on C and N.

:func:`hta_breakdown` and :func:`hta_overlap` give Holistic Trace Analysis's
whole-trace figures (``get_temporal_breakdown``, ``get_comm_comp_overlap``)
with HTA 0.5.0's own definitions, which differ from these (docs/traces.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dlsched.formats.kineto_trace import KinetoTrace, TraceError
from dlsched.profiling import kineto_events as ke

from . import intervals as iv

DEVICE, HOST = "device", "host"
#: Per-step columns of :attr:`Breakdown.steps` after ``step``, ``ts`` and ``end``; microseconds.
FIGURES = ["span", "compute", "communication", "overlap", "exposed_communication", "memory", "memory_only",
           "busy", "idle"]


@dataclass
class Breakdown:
    """One rank's time breakdown.

    Attributes
    ----------
    mode : str
        ``"device"`` (kernels timed) or ``"host"`` (a CPU-only trace: host ops and collectives).
    steps : pandas.DataFrame
        One row per ``ProfilerStep``: ``step``, ``ts``, ``end`` and :data:`FIGURES` (µs).
    whole : dict
        :data:`FIGURES` over the whole trace, from its first event's start to its last event's end.
    """

    mode: str
    steps: pd.DataFrame
    whole: dict = field(default_factory=dict)


@dataclass
class _Sets:
    compute: iv.Intervals
    communication: iv.Intervals
    memory: iv.Intervals


def breakdown(trace: KinetoTrace) -> Breakdown:
    """The time breakdown of one rank's trace, per step and whole (module docstring).

    Parameters
    ----------
    trace : KinetoTrace

    Returns
    -------
    Breakdown

    Examples
    --------
    >>> ev = pd.DataFrame({"name": ["ProfilerStep#1", "sgemm", "ncclDevKernel_AllReduce", "Memcpy HtoD"],
    ...     "cat": ["user_annotation", "kernel", "kernel", "gpu_memcpy"], "pid": "1", "tid": "1",
    ...     "ts": [0.0, 10.0, 30.0, 60.0], "dur": [100.0, 30.0, 20.0, 30.0], "stream": [-1, 7, 20, 7]})
    >>> ev["end"] = ev.ts + ev.dur
    >>> b = breakdown(KinetoTrace(path="t.json", events=ev))
    >>> b.mode, b.steps.loc[0, ["compute", "overlap", "exposed_communication", "memory_only", "idle"]].tolist()
    ('device', [30.0, 10.0, 10.0, 30.0, 30.0])
    """
    events = trace.events
    sets, mode = _busy_sets(events)
    st = ke.steps(events)
    rows = _figures(sets, st["ts"].to_numpy(float), st["end"].to_numpy(float))
    table = pd.DataFrame({"step": st["step"].to_numpy(np.int64), "ts": st["ts"].to_numpy(float),
                          "end": st["end"].to_numpy(float), **rows})
    timed = events[events["cat"] != "Trace"]
    if timed.empty:
        timed = events
    whole = _figures(sets, [float(timed["ts"].min())], [float(timed["end"].max())])
    return Breakdown(mode=mode, steps=table, whole={k: float(v[0]) for k, v in whole.items()})


def _busy_sets(events: pd.DataFrame) -> tuple[_Sets, str]:
    dev = ke.device_events(events)
    if not dev.empty:
        def kind(k: str) -> iv.Intervals:
            d = dev[dev["kind"] == k]
            return iv.merge(d["ts"].to_numpy(), d["end"].to_numpy())
        return _Sets(kind(ke.COMPUTE), kind(ke.COMMUNICATION), kind(ke.MEMORY)), DEVICE
    comm_ev = ke.host_collectives(events)
    comm = iv.merge(comm_ev["ts"].to_numpy(), comm_ev["end"].to_numpy())
    ops = ke.host_ops(events)
    ops = ops[~ops.index.isin(comm_ev.index)]
    per_thread = []
    for (pid, tid), g in ops.groupby(["pid", "tid"], sort=False):
        mine = comm_ev[(comm_ev["pid"] == pid) & (comm_ev["tid"] == tid)]
        busy = iv.merge(g["ts"].to_numpy(), g["end"].to_numpy())
        per_thread.append(iv.subtract(busy, iv.merge(mine["ts"].to_numpy(), mine["end"].to_numpy())))
    return _Sets(iv.union(*per_thread), comm, (np.empty(0), np.empty(0))), HOST


def _figures(sets: _Sets, lo, hi) -> dict[str, np.ndarray]:
    """:data:`FIGURES` inside each window ``[lo, hi]``, from union lengths alone."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    c = iv.covered(sets.compute, lo, hi)
    m = iv.covered(sets.communication, lo, hi)
    y = iv.covered(sets.memory, lo, hi)
    cm_set = iv.union(sets.compute, sets.communication)
    cm = iv.covered(cm_set, lo, hi)
    busy = iv.covered(iv.union(cm_set, sets.memory), lo, hi)
    span = hi - lo
    # Each difference is ≥ 0 exactly; max(…, 0) only removes float rounding's last bit.
    return {"span": span, "compute": c, "communication": m, "overlap": np.maximum(c + m - cm, 0.0),
            "exposed_communication": np.maximum(cm - c, 0.0), "memory": y,
            "memory_only": np.maximum(busy - cm, 0.0), "busy": busy, "idle": np.maximum(span - busy, 0.0)}


# Holistic Trace Analysis 0.5.0's kernel types (hta/utils/utils.py): matched at the name's start.
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_kernels(trace: KinetoTrace) -> pd.DataFrame:
    """The events HTA 0.5.0's breakdown and overlap count, with HTA's ``kernel_type``.

    HTA keeps, per rank (``hta/common/trace.py``, ``trace_parser.py``):

    - complete events with a category, the ``Trace`` span dropped; when any
      ``ts`` has a fraction (a nanosecond trace), ``ts`` rounded up and the
      end rounded down;
    - with two or more distinct ``ProfilerStep`` names: the host events that
      start before the last ``ProfilerStep`` starts, and the GPU events
      (``stream >= 0`` and a correlation id, or ``Event Sync``/``Context Sync``)
      whose correlation id one of those host events carries; so the last step
      and GPU work not launched inside the trace are left out;
    - of those, every event with a stream (``stream != -1``): kernels, copies,
      sets and the ``cuda_sync`` waits on a stream.

    A kernel is ``COMMUNICATION`` when its name starts ``nccl…Kernel``,
    ``MEMORY`` when it starts ``Memcpy``, ``Memset`` or ``dma``, ``COMPUTATION``
    unless its name starts ``nccl…Kernel`` or ``Memset``, or holds ``Memcpy`` or
    ``Sync``; ``OTHER`` otherwise.

    Returns
    -------
    pandas.DataFrame
        ``name``, ``ts``, ``end``, ``stream``, ``kernel_type``.

    Raises
    ------
    TraceError
        The trace has no such event (a CPU-only trace): HTA's breakdown is undefined there.
    """
    ev = trace.events
    ev = ev[(ev["cat"] != "Trace") & (ev["cat"] != "")]
    ts, end = ev["ts"].to_numpy(float), ev["end"].to_numpy(float)
    if (ts != np.floor(ts)).any():
        ts, end = np.ceil(ts), np.floor(end)
    ev = pd.DataFrame({"name": ev["name"].to_numpy(), "ts": ts, "end": end, "stream": ev["stream"].to_numpy(),
                       "correlation": ev["correlation"].to_numpy()})
    step_names = ev["name"][ev["name"].str.contains("ProfilerStep", regex=False)].unique()
    if len(step_names) >= 2:
        gpu = ((ev["stream"] >= 0) & (ev["correlation"] >= 0)) | ev["name"].isin(("Event Sync", "Context Sync"))
        cpu = ev[~gpu]
        last_start = cpu["ts"][cpu["name"].isin(step_names)].max()
        cpu = cpu[cpu["ts"] < last_start]
        kept = ev[gpu & ev["correlation"].isin(cpu["correlation"].unique())]
        ev = pd.concat([kept, cpu])
    k = ev[ev["stream"] != -1].copy()
    if k.empty:
        raise TraceError(f"{trace.path}: the trace has no GPU events (no kernel, copy or sync on a stream), so "
                         "Holistic Trace Analysis's temporal breakdown and overlap are undefined for it (HTA 0.5.0 "
                         "fails on such a trace); dlsched's own breakdown times a CPU-only trace from its host ops")
    names = k["name"]
    k["kernel_type"] = np.select(
        [names.str.match(_HTA_COMM), names.str.match(_HTA_MEMORY), ~names.str.match(_HTA_NOT_COMPUTE)],
        ["COMMUNICATION", "MEMORY", "COMPUTATION"], "OTHER")
    return k[["name", "ts", "end", "stream", "kernel_type"]].reset_index(drop=True)


def hta_breakdown(trace: KinetoTrace) -> dict:
    """HTA 0.5.0's ``get_temporal_breakdown`` for one rank, by its definitions.

    ``kernel_time`` is the span from the first counted GPU event's start to the
    end of the last merged interval (:func:`hta_kernels`), ``idle_time`` that
    span less the union of all of them, ``compute_time`` the union of the
    ``COMPUTATION`` ones, ``non_compute_time`` the rest
    (``kernel_time − compute_time − idle_time``: communication, memory and
    the sync waits, less what compute hides of them). Percentages are of
    ``kernel_time``, unrounded (HTA rounds to 2 places).

    Returns
    -------
    dict
        ``idle_time``, ``compute_time``, ``non_compute_time``, ``kernel_time`` (µs) and
        ``idle_time_pctg``, ``compute_time_pctg``, ``non_compute_time_pctg``.

    Raises
    ------
    TraceError
        A trace without GPU events (:func:`hta_kernels`).
    """
    k = hta_kernels(trace)
    merged = iv.merge(k["ts"].to_numpy(), k["end"].to_numpy())
    kernel_time = float(merged[1][-1] - merged[0][0])
    idle = kernel_time - iv.length(merged)
    comp = k[k["kernel_type"] == "COMPUTATION"]
    compute = iv.length(iv.merge(comp["ts"].to_numpy(), comp["end"].to_numpy()))
    out = {"idle_time": idle, "compute_time": compute, "non_compute_time": kernel_time - compute - idle,
           "kernel_time": kernel_time}
    for key in ("idle_time", "compute_time", "non_compute_time"):
        out[f"{key}_pctg"] = 100 * out[key] / kernel_time if kernel_time > 0 else float("nan")
    return out


def hta_overlap(trace: KinetoTrace) -> float | None:
    """HTA 0.5.0's ``comp_comm_overlap_pctg`` for one rank: the share of communication time hidden by compute.

    100 × |C ∩ M| / |M|, C and M the unions of HTA's ``COMPUTATION`` and
    ``COMMUNICATION`` kernels (:func:`hta_kernels`). None when the trace has no
    communication kernel (HTA reports NaN).
    """
    k = hta_kernels(trace)
    comp = k[k["kernel_type"] == "COMPUTATION"]
    comm = k[k["kernel_type"] == "COMMUNICATION"]
    c = iv.merge(comp["ts"].to_numpy(), comp["end"].to_numpy())
    m = iv.merge(comm["ts"].to_numpy(), comm["end"].to_numpy())
    total = iv.length(m)
    if total <= 0:
        return None
    both = iv.length(c) + total - iv.length(iv.union(c, m))
    return 100 * both / total
