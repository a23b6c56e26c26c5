"""Single-device batch plan: the largest batch that fits, and its throughput (DESIGN §5).

Paper ``003_*`` §3.1.3 bounds the mini-batch by the device memory left after
parameters, gradients and feature maps (its ``M_bound``) and then looks for the
fastest batch within that bound. :func:`plan_batch` applies the bound to a
:class:`~dlsched.planning.memory.MemoryEstimate`; :func:`throughput_table`
lists samples/s at a few batch sizes from a time curve.

Examples
--------
>>> from dlsched.planning.memory import MemoryEstimate
>>> est = MemoryEstimate("m", "static", "sgd", param_bytes=100, activation_bytes_per_sample=10)
>>> plan = plan_batch(est, capacity=1000, margin=0.1)
>>> plan.batch, plan.usable_bytes
(70, 900.0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dlsched.errors import DlschedError

from .memory import MemoryEstimate, fmt_bytes


@dataclass
class BatchPlan:
    """The largest batch for one device and its memory breakdown."""

    estimate: MemoryEstimate
    capacity: float
    margin: float
    batch: int

    @property
    def usable_bytes(self) -> float:
        return self.capacity * (1 - self.margin)

    def frame(self):
        """Memory breakdown at the planned batch (DataFrame)."""
        return self.estimate.frame(self.batch)

    def to_dict(self) -> dict:
        return {"batch": self.batch, "capacity": self.capacity, "margin": self.margin,
                "usable": self.usable_bytes, "estimate": self.estimate.estimate,
                "memory": self.estimate.to_dict(self.batch)}


def plan_batch(estimate: MemoryEstimate, capacity: float, margin: float = 0.1) -> BatchPlan:
    """Largest ``b`` with ``M(b) ≤ capacity·(1 − margin)``.

    Raises
    ------
    DlschedError
        When not even one sample fits (the message gives the memory needed).
    """
    b = estimate.largest_batch(capacity, margin)
    if b < 1:
        need = estimate.total(1) / (1 - margin)
        raise DlschedError(
            f"model {estimate.model!r} does not fit in {fmt_bytes(capacity)} even at batch 1 "
            f"({estimate.estimate} estimate: {fmt_bytes(estimate.total(1))} for one sample with {estimate.optimizer}, "
            f"so at least {fmt_bytes(need)} of memory with a {margin:.0%} margin)")
    return BatchPlan(estimate, float(capacity), margin, b)


def linear_time_curve(seconds: float, batch: int) -> Callable[[float], float]:
    """``t(b) = seconds · b / batch``: compute time measured at ``batch``, scaled linearly."""
    if batch < 1 or seconds < 0:
        raise DlschedError(f"a time curve needs a positive batch and a non-negative time, got {seconds} s at {batch}")
    rate = seconds / batch
    return lambda b: rate * b


def interpolated_time_curve(points: dict[int, float]) -> Callable:
    """Piecewise-linear, monotone ``t(b)`` through measured ``{batch: seconds}``.

    Below the smallest batch it scales towards 0 at ``b = 0``; above the largest
    it extends the last segment's slope. Times are made non-decreasing by a
    running maximum (a measurement that got faster with a bigger batch is noise
    for the planner, which needs monotone curves).

    Works on scalars and numpy arrays.
    """
    import numpy as np

    if not points:
        raise DlschedError("a measured time curve needs at least one (batch, seconds) point")
    bs = np.array(sorted(points), dtype=float)
    if bs[0] < 1:
        raise DlschedError(f"time-curve batches must be ≥ 1, got {bs[0]:g}")
    ts = np.maximum.accumulate(np.array([float(points[int(b)]) for b in bs]))
    if (ts < 0).any():
        raise DlschedError("time-curve times must be ≥ 0")
    xs = np.concatenate([[0.0], bs])
    ys = np.concatenate([[0.0], ts])
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])

    def curve(b):
        b = np.asarray(b, dtype=float)
        out = np.interp(b, xs, ys)
        out = np.where(b > xs[-1], ys[-1] + slope * (b - xs[-1]), out)
        return out if out.ndim else float(out)

    return curve


def throughput_table(curve: Callable, batches, max_batch: int | None = None):
    """Samples per second at ``batches`` for the time curve ``t(b)`` (DataFrame).

    Columns: ``batch``, ``time`` (s per step), ``samples_per_s``, ``fits``
    (batch ≤ ``max_batch``).
    """
    import pandas as pd

    rows = []
    for b in sorted({int(b) for b in batches if int(b) >= 1}):
        t = float(curve(b))
        rows.append({"batch": b, "time": t, "samples_per_s": b / t if t > 0 else float("inf"),
                     "fits": max_batch is None or b <= max_batch})
    return pd.DataFrame(rows, columns=["batch", "time", "samples_per_s", "fits"])


def default_table_batches(max_batch: int) -> list[int]:
    """Powers of two up to the planned batch, plus the planned batch itself."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    out.append(max_batch)
    return out[-5:]
