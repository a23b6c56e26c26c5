"""A model's data-parallel training step from its DAG and oracle: DDP gradient buckets and the network's α, β.

:func:`ddp_buckets_of` gives the buckets torch's ``DistributedDataParallel``
(torch 2.13) really launches for a model, before and after it rebuilds them:

- DDP's parameters are the module's trainable ones in registration order, a
  tied weight once; dtypes and devices are bucketed apart.
- Before the rebuild (the first iteration), DDP packs them in registration
  order with ``compute_bucket_assignment_by_size`` and reverses the buckets.
  Unless ``find_unused_parameters=True`` the limit is ``sys.maxsize``: one
  bucket per dtype, the whole model in one all-reduce.
- After the first iteration DDP packs them again, in the order their gradients
  became ready (:func:`.grad_ready_order.ready_order`), the first bucket capped
  at 1 MiB and the others at ``bucket_cap_mb`` (:func:`bucket_assignment`).
  With ``find_unused_parameters=True`` it never rebuilds.
- The 1 MiB first cap (``dist._DEFAULT_FIRST_BUCKET_BYTES``) holds only while
  ``bucket_cap_mb`` is left at its default; a ``bucket_cap_mb`` given by hand
  caps the first bucket too (``_BucketCapacityConfig.create``).

:func:`step_shape` times one process's step: one iteration is simulated with
every transfer free (:func:`~.simulate.simulate`), the gradients are packed in
their ready order as DDP packs them once it has rebuilt its buckets, and a
bucket is ready when its last gradient is. The oracle's transfer ops were timed
``latency + bytes/bandwidth`` (``dlsched profile``), so a least-squares line
through them gives α and β.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(12, 6, training=True, seed=2)
>>> shape = step_shape(g, t, bucket_bytes=64 * 1024)
>>> shape.gradient_bytes == sum(s.bytes for s in g.sends()), shape.bucket_offsets[-1] == shape.compute_s
(True, True)
>>> t2 = {**t, **{op.name: 5e-5 + op.bytes / 1.25e9 for op in g.recvs() + g.sends()}}
>>> alpha, beta = network_from_oracle(g, t2)
>>> round(alpha * 1e6, 3), round(beta / 1e9, 3)
(50.0, 1.25)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError

from .allreduce_sim import StepShape
from .grad_ready_order import ready_order
from .simulate import simulate

#: DDP's default bucket cap (``bucket_cap_mb=25``).
DEFAULT_BUCKET_BYTES = 25 * 1024**2
#: DDP's cap on its first bucket (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``): the first gradients
#: ready leave early, so the network starts while backward is young. torch 2.13 applies it only while
#: ``bucket_cap_mb`` is left at its default; a ``bucket_cap_mb`` given by hand caps the first bucket too.
FIRST_BUCKET_BYTES = 1024**2
_MB = 1024**2


def bucket_assignment(sizes: Sequence[int], bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                      first_bucket_bytes: int = FIRST_BUCKET_BYTES) -> list[list[int]]:
    """DDP's buckets over gradients of ``sizes`` bytes, given in gradient-ready order.

    The rule of ``compute_bucket_assignment_by_size`` in torch's reducer, as DDP
    applies it when it rebuilds its buckets after the first iteration: gradients
    join the open bucket in order, a parameter is never split, and a bucket closes
    as soon as its bytes reach its limit, which is ``first_bucket_bytes`` for the
    first bucket and ``bucket_bytes`` for every later one. What is left at the end
    is the last bucket. (DDP also keeps dtypes and devices apart; a DAG's
    gradients share both.)

    Parameters
    ----------
    sizes : sequence of int
        Gradient bytes, first ready first.
    bucket_bytes, first_bucket_bytes : int
        ``bucket_cap_mb`` in bytes, and the first bucket's cap.

    Returns
    -------
    list of list of int
        Indices into ``sizes``, bucket by bucket in launch order.

    Examples
    --------
    ResNet-18's fc (bias, then weight) is ready first and fills the 1 MiB first bucket alone:

    >>> [len(b) for b in bucket_assignment([4_000, 2_048_000, 1_000_000, 30_000_000, 5], 25 * 2**20)]
    [2, 2, 1]
    """
    if bucket_bytes <= 0 or first_bucket_bytes <= 0:
        raise DlschedError(f"bucket caps must be positive, got {first_bucket_bytes} and {bucket_bytes} bytes")
    buckets, open_, size, limit = [], [], 0, first_bucket_bytes
    for i, b in enumerate(sizes):
        open_.append(i)
        size += int(b)
        if size >= limit:
            buckets.append(open_)
            open_, size, limit = [], 0, bucket_bytes
    if open_:
        buckets.append(open_)
    return buckets


def _by_size(items: Sequence[tuple[int, int, str]], limits: Sequence[int], sort: bool) -> list[list[int]]:
    """``compute_bucket_assignment_by_size`` over ``(index, bytes, dtype)`` items: each dtype has its open
    bucket and walks ``limits`` on its own (the last limit repeats); with ``sort`` the buckets are ordered
    by their smallest index, as DDP orders them when it has no ready order."""
    buckets: list[list[int]] = []
    open_: dict[str, tuple[list[int], int, int]] = {}
    for index, size, key in items:
        members, total, k = open_.get(key, ([], 0, 0))
        members, total = members + [index], total + int(size)
        if total >= limits[k]:
            buckets.append(members)
            open_[key] = ([], 0, min(k + 1, len(limits) - 1))
        else:
            open_[key] = (members, total, k)
    # What is left, dtype by dtype (DDP walks a hash map here; a model of one dtype has one).
    buckets += [members for members, _, _ in open_.values() if members]
    return sorted(buckets, key=min) if sort else buckets


@dataclass(frozen=True)
class DDPBucket:
    """One of DDP's gradient buckets: its parameters (recv op names, in the bucket's order), bytes, dtype."""

    params: tuple[str, ...]
    bytes: int
    dtype: str


def ddp_buckets_of(graph: Graph, bucket_cap_mb: float | None = None, find_unused_parameters: bool = False,
                   rebuilt: bool = True, times: Mapping[str, float] | None = None) -> list[DDPBucket]:
    """The buckets ``DistributedDataParallel(module, bucket_cap_mb=…, find_unused_parameters=…)`` launches.

    See the module docstring for DDP's rules (torch 2.13).

    Parameters
    ----------
    graph : Graph
        A training graph of the module (one ``send`` per trained parameter).
    bucket_cap_mb : float, optional
        DDP's ``bucket_cap_mb``; ``None`` for its default (25 MiB, and a 1 MiB first bucket).
    find_unused_parameters : bool
        DDP's argument of that name: bucketed by size from the start, and never rebuilt.
    rebuilt : bool
        The buckets after the first iteration (``True``), or those of the first iteration.
    times : mapping, optional
        Op times, for a graph without a recorded engine order (:func:`.grad_ready_order.ready_order`).

    Returns
    -------
    list of DDPBucket
        In launch order (DDP launches bucket ``i`` only after bucket ``i-1``).

    Raises
    ------
    DlschedError
        An inference graph, or a cap of no bytes.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(10, 5, training=True, seed=3)
    >>> [len(b.params) for b in ddp_buckets_of(g, rebuilt=False)] == [len(g.sends())]
    True
    >>> sum(b.bytes for b in ddp_buckets_of(g, bucket_cap_mb=0.001)) == sum(s.bytes for s in g.sends())
    True
    """
    if bucket_cap_mb is not None and bucket_cap_mb <= 0:
        raise DlschedError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
    cap = int((DEFAULT_BUCKET_BYTES / _MB if bucket_cap_mb is None else bucket_cap_mb) * _MB)
    first = FIRST_BUCKET_BYTES if bucket_cap_mb is None else cap
    if cap <= 0:
        raise DlschedError(f"bucket_cap_mb={bucket_cap_mb} is less than a byte")
    sends = {s.param: s for s in graph.sends()}
    if not sends:
        raise DlschedError(f"{graph.name} has no gradients to all-reduce: it is an inference graph; load it "
                           "with --mode training")
    params = [r.name for r in graph.recvs() if r.name in sends]  # registration order: DDP's parameter indices
    size = {p: sends[p].bytes for p in params}
    dtype = {p: (sends[p].dtypes or ["float32"])[0] for p in params}
    if find_unused_parameters or not rebuilt:
        limits = ([first, cap] if first < cap else [cap]) if find_unused_parameters else [sys.maxsize]
        buckets = _by_size([(i, size[p], dtype[p]) for i, p in enumerate(params)], limits, sort=True)[::-1]
    else:
        index = {p: i for i, p in enumerate(params)}
        order = ready_order(graph, times)
        buckets = _by_size([(index[p], size[p], dtype[p]) for p in order], [first, cap], sort=False)
    return [DDPBucket(tuple(params[i] for i in b), sum(size[params[i]] for i in b), dtype[params[b[0]]])
            for b in buckets]


def step_shape(graph: Graph, times: Mapping[str, float], bucket_bytes: int = DEFAULT_BUCKET_BYTES,
               first_bucket_bytes: int = FIRST_BUCKET_BYTES) -> StepShape:
    """Forward + backward time and the gradient buckets of one process's step (:func:`bucket_assignment`).

    Gradients are packed in their ready order (:func:`.grad_ready_order.ready_order`).

    Raises
    ------
    DlschedError
        The graph has no gradients (an inference graph), or a bucket cap of no bytes.
    """
    sends = graph.sends()
    if not sends:
        raise DlschedError(f"{graph.name} has no gradients to all-reduce: it is an inference graph; load it "
                           "with --mode training")
    if bucket_bytes <= 0:
        raise DlschedError(f"the bucket size must be positive, got {bucket_bytes} bytes")
    free = {op.name: (0.0 if op.kind != COMPUTE else float(times[op.name])) for op in graph.ops()}
    sched = simulate(graph, free, unordered="canonical")
    end = sched.end
    compute_s = max(end[op.name] for op in graph.compute_ops()) if graph.compute_ops() else 0.0
    by_param = {op.param: op for op in sends}
    produced = [by_param[p] for p in ready_order(graph, times)]
    buckets = bucket_assignment([op.bytes for op in produced], bucket_bytes, min(first_bucket_bytes, bucket_bytes))
    sizes = [sum(produced[i].bytes for i in b) for b in buckets]
    offsets = [min(max(end[produced[i].name] for i in b), compute_s) for b in buckets]
    offsets[-1] = compute_s  # the process calls the collective when backward ends
    return StepShape(float(compute_s), tuple(float(o) for o in offsets), tuple(int(s) for s in sizes))


def network_from_oracle(graph: Graph, times: Mapping[str, float]) -> tuple[float, float]:
    """``(α seconds, β bytes/s)``: the least-squares line ``time = α + bytes/β`` through the oracle's transfers.

    Raises
    ------
    DlschedError
        Fewer than two distinct transfer sizes, or times that do not grow with
        the size: give ``--latency`` and ``--bandwidth`` instead.
    """
    ops = graph.recvs() + graph.sends()
    sizes = np.array([op.bytes for op in ops], dtype=float)
    secs = np.array([times[op.name] for op in ops], dtype=float)
    if len(np.unique(sizes)) < 2:
        raise DlschedError(f"the oracle's transfers of {graph.name} do not show two sizes, so the network's "
                           "latency and bandwidth cannot be told apart; give --latency and --bandwidth")
    slope, intercept = np.polyfit(sizes, secs, 1)
    if slope <= 0:
        raise DlschedError("the oracle's transfer times do not grow with their size, so they give no bandwidth; "
                           "give --latency and --bandwidth")
    return max(float(f"{intercept:.9g}"), 0.0), float(f"{1.0 / slope:.9g}")
