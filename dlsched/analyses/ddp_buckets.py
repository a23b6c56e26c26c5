"""A model's data-parallel training step from its DAG and oracle: DDP gradient buckets and the network's α, β.

One iteration is simulated with every transfer free (:func:`~.simulate.simulate`);
a gradient is produced when its send op becomes ready, which gives backward's
production order and times. Gradients are packed in that order into buckets
of at most ``bucket_bytes`` (a bucket closes once it reaches the cap, as DDP's
``bucket_cap_mb``, default 25 MiB, does); a bucket is ready when its last
gradient is. The oracle's transfer ops were timed ``latency + bytes/bandwidth``
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

from typing import Mapping

import numpy as np

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError

from .allreduce_sim import StepShape
from .simulate import simulate

#: DDP's default bucket cap (``bucket_cap_mb=25``).
DEFAULT_BUCKET_BYTES = 25 * 1024**2


def step_shape(graph: Graph, times: Mapping[str, float], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> StepShape:
    """Forward + backward time and the gradient buckets of one process's step.

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
    offsets, sizes, size, ready = [], [], 0, 0.0
    for op in produced:
        size, ready = size + op.bytes, max(ready, end[op.name])
        if size >= bucket_bytes:
            offsets.append(ready)
            sizes.append(size)
            size = 0
    if size:
        offsets.append(ready)
        sizes.append(size)
    offsets = [min(o, compute_s) for o in offsets]
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
