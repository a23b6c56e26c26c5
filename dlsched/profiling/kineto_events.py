"""What a Kineto trace's events are: GPU kernels by kind, runtime launches, host ops, steps.

One place says how to tell them apart, so the trace import, the breakdown, the
collectives and the replay agree on it.

- **Device events** are categories ``kernel``, ``gpu_memcpy`` and ``gpu_memset``.
  A kernel is *communication* when its name says NCCL or RCCL
  (``ncclKernel_*``, ``ncclDevKernel_*``, ``rcclGenericKernel``…), *memory* for
  copies and sets (Holistic Trace Analysis's rule: ``Memcpy``/``Memset`` in the
  name or category), otherwise *compute*.
- **Runtime launches** are ``cuda_runtime`` / ``cuda_driver`` (NVIDIA) and
  ``hip_runtime`` / the HIP calls (AMD); a launch and the kernel it queued share
  ``args.correlation``.
- **Host ops** are ``cpu_op`` and ``user_annotation`` events on a host thread.
- **Host collectives** are the record functions a collective leaves on the
  host (``record_param_comms``, ``c10d::allreduce_``, ``gloo:all_reduce``,
  ``nccl:all_reduce``, ``_c10d_functional::wait_tensor``…); on a CPU-only
  (gloo) trace they are the only trace of communication.
- **Steps** are the host ``ProfilerStep#N`` annotations (``torch.profiler``'s
  ``prof.step()``); their GPU twins (``gpu_user_annotation``) are not steps.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime"})
HOST_CATS = frozenset({"cpu_op", "user_annotation", "Operator", "operator"})
_COMM_KERNEL = re.compile(r"nccl|rccl", re.IGNORECASE)
_MEMORY = re.compile(r"memcpy|memset", re.IGNORECASE)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: Host record functions of a collective: each backend's own (``gloo:all_reduce``), c10d's ops and
#: functional collectives, DDP's ``record_param_comms``, ``ProcessGroup*`` calls.
HOST_COLLECTIVE = re.compile(r"^(gloo:|nccl:|mpi:|ucc:|xccl:|rccl:|hccl:|c10d::|_?c10d_functional::|record_param_comms|"
                             r"ProcessGroup)", re.IGNORECASE)

COMPUTE, COMMUNICATION, MEMORY = "compute", "communication", "memory"


def device_kind(name: str, cat: str) -> str:
    """``compute``, ``communication`` or ``memory`` for a device event.

    Examples
    --------
    >>> device_kind("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "kernel")
    'communication'
    >>> device_kind("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy"), device_kind("sm80_xmma_fprop", "kernel")
    ('memory', 'compute')
    """
    if _COMM_KERNEL.search(name):
        return COMMUNICATION
    if cat in ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset") or _MEMORY.search(name):
        return MEMORY
    return COMPUTE


def device_events(events: pd.DataFrame) -> pd.DataFrame:
    """The device events of a trace's frame with a ``kind`` column (:func:`device_kind`)."""
    dev = events[events["cat"].isin(DEVICE_CATS)].copy()
    kinds: dict = {}  # names repeat: classify each (name, cat) once
    dev["kind"] = [kinds.get(k) or kinds.setdefault(k, device_kind(*k)) for k in zip(dev["name"], dev["cat"])]
    return dev


def runtime_events(events: pd.DataFrame) -> pd.DataFrame:
    """The runtime launch events (CUDA or HIP) of a trace's frame."""
    return events[events["cat"].isin(RUNTIME_CATS)]


def host_ops(events: pd.DataFrame) -> pd.DataFrame:
    """The host ops (``cpu_op``, ``user_annotation``) of a trace's frame, steps excluded."""
    host = events[events["cat"].isin(HOST_CATS)]
    return host[~host["name"].str.startswith("ProfilerStep#")]


def is_host_collective(name: str) -> bool:
    """True for a host record function of a collective (or of its wait).

    >>> [is_host_collective(n) for n in ("gloo:all_reduce", "c10d::allreduce_", "record_param_comms", "aten::mm")]
    [True, True, True, False]
    """
    return HOST_COLLECTIVE.match(name) is not None


def host_collectives(events: pd.DataFrame) -> pd.DataFrame:
    """The host events (:data:`HOST_CATS`) that are collectives (:func:`is_host_collective`)."""
    host = events[events["cat"].isin(HOST_CATS)]
    return host[host["name"].str.match(HOST_COLLECTIVE)]


def steps(events: pd.DataFrame) -> pd.DataFrame:
    """The trace's ``ProfilerStep#N`` spans on the host, one row per step, by step number.

    Returns
    -------
    pandas.DataFrame
        ``step`` (N), ``ts``, ``end``, ``dur`` (microseconds), ``pid``, ``tid``. When a step
        appears twice on the host (two threads annotate it), the longer one is kept.

    Examples
    --------
    >>> ev = pd.DataFrame({"name": ["ProfilerStep#4", "ProfilerStep#4", "aten::mm"],
    ...     "cat": ["user_annotation", "gpu_user_annotation", "cpu_op"], "pid": ["1", "0", "1"],
    ...     "tid": ["1", "7", "1"], "ts": [0.0, 5.0, 1.0], "dur": [10.0, 3.0, 2.0]})
    >>> ev["end"] = ev.ts + ev.dur
    >>> [(int(r.step), r.ts, r.end) for r in steps(ev).itertuples()]
    [(4, 0.0, 10.0)]
    """
    m = events["name"].str.match(_STEP) & ~events["cat"].isin(("gpu_user_annotation",) + tuple(DEVICE_CATS))
    s = events[m].copy()
    s["step"] = s["name"].str.extract(_STEP, expand=False).astype(np.int64)
    s = s.sort_values(["step", "dur"], ascending=[True, False]).drop_duplicates("step")
    return s[["step", "ts", "end", "dur", "pid", "tid"]].reset_index(drop=True)


def launches(events: pd.DataFrame) -> pd.DataFrame:
    """Each device event joined to the runtime call that queued it, through ``correlation``.

    CUDA and HIP calls join alike (``hipLaunchKernel``, ``hipExtModuleLaunchKernel``,
    ``hipMemcpyAsync`` are ``cuda_runtime`` events in ROCm traces). A device event left without a
    launch was queued before the profiler opened its host window: in the public MI300X DDP trace all
    968 of them carry correlation ids below the first runtime call's.

    Returns
    -------
    pandas.DataFrame
        The device events (:func:`device_events`) with ``launch_ts``, ``launch_end``,
        ``launch_pid`` and ``launch_tid`` (NaN / None where no launch carries the id).
    """
    dev = device_events(events)
    rt = runtime_events(events)
    rt = rt[rt["correlation"] >= 0].drop_duplicates("correlation")
    rt = rt[["correlation", "ts", "end", "pid", "tid"]].rename(
        columns={"ts": "launch_ts", "end": "launch_end", "pid": "launch_pid", "tid": "launch_tid"})
    out = dev.merge(rt, on="correlation", how="left")
    return out
