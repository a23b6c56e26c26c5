"""GPU time of host ops: each device event is charged to the host op whose runtime call queued it.

A PyTorch op runs on the host for as long as it takes to *dispatch* its work;
the work itself runs later on the GPU, as the kernels (and copies, sets) its
runtime calls queued. Host time misleads both ways: AlexNet's conv2 spends
14.97 ms on the host and 0.3 ms on the GPU; a small op spends 20 us launching a
2 us kernel. So an op's GPU time is the sum of the durations of the device
events whose launch (``cudaLaunchKernel``, ``hipExtModuleLaunchKernel``,
``cudaMemcpyAsync``… joined to the device event through ``correlation``,
:func:`dlsched.profiling.kineto_events.launches`) starts inside the op's span
*on the op's own thread*. Copies and sets count only when the op launched them;
NCCL/RCCL kernels never count (they are collectives, not the op's compute).

Intervals here are *disjoint per thread* (the outermost events of a set, or the
units of the trace import, which never nest), so a point finds its interval by
one binary search.

Examples
--------
>>> import pandas as pd
>>> containing(pd.Series(["1/1", "1/1", "1/2"]), np.array([5.0, 30.0, 6.0]),
...            pd.Series(["1/1", "1/1"]), np.array([0.0, 20.0]), np.array([10.0, 25.0])).tolist()
[0, -1, -1]
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .kineto_events import COMMUNICATION, COMPUTE, host_ops, launches


def thread_key(frame: pd.DataFrame, pid: str = "pid", tid: str = "tid") -> pd.Series:
    """``pid/tid`` as one string per row: threads of different processes stay apart."""
    return frame[pid].astype(str) + "/" + frame[tid].astype(str)


def containing(point_thread: pd.Series, point_ts: np.ndarray, iv_thread: pd.Series, iv_ts: np.ndarray,
               iv_end: np.ndarray) -> np.ndarray:
    """For each point, the index of the interval on its thread that holds it (``ts <= point <= end``), else -1.

    The intervals of one thread must not overlap one another.
    """
    out = np.full(len(point_ts), -1, dtype=np.int64)
    if not len(point_ts) or not len(iv_ts):
        return out
    pt = np.asarray(point_thread, dtype=object)
    it = np.asarray(iv_thread, dtype=object)
    point_ts, iv_ts, iv_end = (np.asarray(a, dtype=float) for a in (point_ts, iv_ts, iv_end))
    for th in np.intersect1d(np.unique(pt.astype(str)), np.unique(it.astype(str))):
        ivs = np.flatnonzero(it.astype(str) == th)
        ivs = ivs[np.argsort(iv_ts[ivs], kind="stable")]
        pts = np.flatnonzero(pt.astype(str) == th)
        k = np.searchsorted(iv_ts[ivs], point_ts[pts], side="right") - 1
        ok = k >= 0
        ok[ok] = point_ts[pts[ok]] <= iv_end[ivs[k[ok]]] + 1e-3
        out[pts[ok]] = ivs[k[ok]]
    return out


def outermost(frame: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the rows of ``frame`` (``pid, tid, ts, end``) that no other row of the frame holds."""
    mask = np.zeros(len(frame), dtype=bool)
    if not len(frame):
        return mask
    keys = thread_key(frame).to_numpy()
    ts, end = frame["ts"].to_numpy(float), frame["end"].to_numpy(float)
    for th in np.unique(keys):
        idx = np.flatnonzero(keys == th)
        idx = idx[np.lexsort((-end[idx], ts[idx]))]
        # An event is outermost when it starts after every earlier (longer-first) event has ended.
        reach = np.maximum.accumulate(end[idx])
        prev = np.concatenate(([-np.inf], reach[:-1]))
        mask[idx] = ts[idx] >= prev - 1e-3
    return mask


def device_launches(events: pd.DataFrame) -> pd.DataFrame:
    """Device events joined to their launch (:func:`~dlsched.profiling.kineto_events.launches`), with
    ``thread`` (the launching ``pid/tid``, None where no launch in the trace carries the id)."""
    dev = launches(events)
    joined = dev["launch_ts"].notna()
    dev["thread"] = None
    if joined.any():
        dev.loc[joined, "thread"] = thread_key(dev[joined], "launch_pid", "launch_tid")
    return dev.reset_index(drop=True)


def charge(dev: pd.DataFrame, iv_thread: pd.Series, iv_ts: np.ndarray, iv_end: np.ndarray) -> dict:
    """Device time launched inside each interval, in microseconds.

    Returns
    -------
    dict
        ``owner`` (per device event: the interval's index or -1), ``gpu`` (per interval: compute and memory
        events, the op's GPU time) and ``compute`` (per interval: compute kernels only).
    """
    n = len(iv_ts)
    joined = dev["thread"].notna().to_numpy()
    owner = np.full(len(dev), -1, dtype=np.int64)
    if joined.any():
        owner[joined] = containing(dev.loc[joined, "thread"], dev.loc[joined, "launch_ts"].to_numpy(float),
                                   iv_thread, iv_ts, iv_end)
    kind = dev["kind"].to_numpy()
    dur = dev["dur"].to_numpy(float)
    has = owner >= 0
    gpu = np.bincount(owner[has & (kind != COMMUNICATION)], weights=dur[has & (kind != COMMUNICATION)], minlength=n)
    comp = np.bincount(owner[has & (kind == COMPUTE)], weights=dur[has & (kind == COMPUTE)], minlength=n)
    return {"owner": owner, "gpu": gpu[:n], "compute": comp[:n]}


def host_join_share(events: pd.DataFrame) -> dict:
    """How much of a trace's compute-kernel time joins to a host op that launched it.

    A host op is a ``cpu_op`` or a ``record_function`` annotation below the ``ProfilerStep``
    (:func:`~dlsched.profiling.kineto_events.host_ops`): extensions such as apex's FusedAdam launch
    their kernels straight from ``Optimizer.step#FusedAdam.step``, with no aten op around the launch.
    Kernels whose launch is not in the trace (queued before the profiler's host window opened) cannot
    join anything; they are counted apart.

    Returns
    -------
    dict
        ``compute_us`` (all compute kernels), ``launched_us`` (those whose launch is in the trace),
        ``joined_us`` (launched inside a host op), ``cpu_op_us`` (launched inside a ``cpu_op``),
        ``share`` (joined / launched; 1.0 with none) and ``share_of_all`` (joined / all).
    """
    dev = device_launches(events)
    comp = dev[dev["kind"] == COMPUTE].reset_index(drop=True)
    dur = comp["dur"].to_numpy(float)
    out = {"compute_us": float(dur.sum()), "launched_us": float(dur[comp["thread"].notna().to_numpy()].sum())}
    for key, host in (("joined_us", host_ops(events)), ("cpu_op_us", events[events["cat"] == "cpu_op"])):
        host = host[outermost(host)]
        owner = charge(comp, thread_key(host), host["ts"].to_numpy(float), host["end"].to_numpy(float))["owner"]
        out[key] = float(dur[owner >= 0].sum())
    out["share"] = out["joined_us"] / out["launched_us"] if out["launched_us"] else 1.0
    out["share_of_all"] = out["joined_us"] / out["compute_us"] if out["compute_us"] else 1.0
    return out
