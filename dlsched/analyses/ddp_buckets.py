"""A model's data-parallel training step from its DAG and oracle: DDP gradient buckets and the network's α, β.

One iteration is simulated with every transfer free (:func:`~.simulate.simulate`);
a gradient is produced when its send op becomes ready, which gives backward's
production order and times. Gradients are packed in that order into buckets
as DDP packs them once it has rebuilt its buckets after the first iteration
(:func:`bucket_assignment`); a bucket is ready when its last gradient is. The oracle's transfer ops were timed ``latency + bytes/bandwidth``
(``dlsched profile``), so a least-squares line through them gives α and β.

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

from typing import Mapping, Sequence

import numpy as np

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError

from .allreduce_sim import StepShape
from .simulate import simulate

#: DDP's default bucket cap (``bucket_cap_mb=25``).
DEFAULT_BUCKET_BYTES = 25 * 1024**2
#: DDP's cap on its first bucket (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``): the first gradients
#: ready leave early, so the network starts while backward is young. torch 2.13 applies it only while
#: ``bucket_cap_mb`` is left at its default; a ``bucket_cap_mb`` given by hand caps the first bucket too.
FIRST_BUCKET_BYTES = 1024**2


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


def step_shape(graph: Graph, times: Mapping[str, float], bucket_bytes: int = DEFAULT_BUCKET_BYTES,
               first_bucket_bytes: int = FIRST_BUCKET_BYTES) -> StepShape:
    """Forward + backward time and the gradient buckets of one process's step (:func:`bucket_assignment`).

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
    produced = sorted(sends, key=lambda op: (end[op.name], op.index))
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
