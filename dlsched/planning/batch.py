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


def oracle_compute_seconds(path, graph=None) -> float:
    """Σ compute-op time of a time-oracle file: one step at the batch it was profiled at.

    With ``graph``, the oracle is mapped onto the model by
    :func:`~dlsched.profiling.oracle_times.load_times` (which refuses one made in
    another mode; its batch may differ, the time curve scales it) and the
    model's compute ops are summed; an op the oracle lacks counts 0 s (as a
    file that times only the compute ops should). Without a graph (a measured
    PyTorch factory), the rows on a ``compute`` resource are summed, or every
    row when the file has no ``resource`` column.

    Raises
    ------
    OracleError
        The file is missing or malformed, or it times no compute op.

    Examples
    --------
    >>> import pandas as pd, tempfile, pathlib
    >>> from dlsched.formats.oracle_file import write_oracle
    >>> from dlsched.synthetic import random_dag
    >>> g, times = random_dag(6, 2, training=True, seed=0)
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "oracle.csv"
    >>> write_oracle(pd.DataFrame({"op": list(times), "time": list(times.values())}), path)
    >>> compute = sum(t for n, t in times.items() if g.op(n).kind == "compute")
    >>> abs(oracle_compute_seconds(path, g) - compute) < 1e-9
    True
    """
    import pandas as pd

    from dlsched.errors import OracleError
    from dlsched.formats.oracle_file import read_oracle
    from dlsched.profiling.oracle_times import load_times

    if graph is not None:
        times = load_times(path, graph, default_time=0.0, any_batch=True)
        total = float(pd.Series([times[op.name] for op in graph.compute_ops()], dtype=float).sum())
    else:
        df = read_oracle(path)
        on_compute = (df["resource"].astype(str).str.startswith("compute") if "resource" in df.columns
                      else pd.Series(True, index=df.index))
        total = float(pd.to_numeric(df["time"])[on_compute].sum())
    if not total > 0:
        raise OracleError(f"{path}: no compute-op times in this oracle (rows need a compute resource "
                          "or names of the model's compute ops)")
    return total


def profiled_batch(batch: int | None, graph=None, unknown: str = "pass --batch", oracle=None) -> int:
    """The batch an oracle was profiled at: the one the ``oracle`` file records, else ``batch``, else the graph's
    (:func:`~dlsched.planning.memory.graph_batch`).

    Raises
    ------
    DlschedError
        With the message ``unknown`` when neither is given.

    Examples
    --------
    >>> profiled_batch(8)
    8
    >>> profiled_batch(None, unknown="--oracle needs --batch")
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: --oracle needs --batch
    """
    from dlsched.formats.oracle_file import oracle_batch

    from dlsched.graph_batch import graph_batch

    at = (oracle_batch(oracle) if oracle is not None else None) or batch
    at = at or (graph_batch(graph) if graph is not None else None)
    if at is None:
        raise DlschedError(unknown)
    return at


def oracle_time_curve(path, graph, batch: int) -> Callable[[float], float]:
    """``t(b)`` from an oracle file: its compute time (:func:`oracle_compute_seconds`) at ``batch``, scaled linearly.

    Examples
    --------
    >>> import pandas as pd, tempfile, pathlib
    >>> from dlsched.formats.oracle_file import write_oracle
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "oracle.csv"
    >>> write_oracle(pd.DataFrame({"op": ["conv"], "time": [0.2], "resource": ["compute"]}), path)
    >>> oracle_time_curve(path, None, 8)(32)
    0.8
    """
    return linear_time_curve(oracle_compute_seconds(path, graph), batch)


def interpolated_time_curve(points: dict[int, float]) -> Callable:
    """Piecewise-linear, monotone ``t(b)`` through measured ``{batch: seconds}``.

    Real steps have a fixed cost ``Γ(0) > 0`` (launch overhead, the optimizer,
    transfers; paper ``002_*`` §3.3.1), so below the smallest measured batch
    ``b₁`` the curve extends the segment of the two smallest measured batches,
    ``t(b) = t₁ + (t₂ − t₁)/(b₂ − b₁)·(b − b₁)``, clamped from below at the
    intercept of the least-squares line through all points (and at 0): a
    convex start is not extrapolated below what the points as a whole say.
    With one point there is no slope to extend and the curve scales through
    the origin. Above the largest batch it extends the last segment's slope.
    Times are made non-decreasing by a running maximum (a measurement that got
    faster with a bigger batch is noise for the planner, which needs monotone
    curves). ``t(0)`` is the fixed cost; a worker given no samples does not
    run, which the planners treat separately (:func:`dlsched.planning.hetero.split_exact`).

    Works on scalars and numpy arrays.

    Examples
    --------
    >>> c = interpolated_time_curve({16: 0.78, 32: 1.26, 64: 2.22})   # 0.3 + 0.03·b
    >>> round(c(0), 6), round(c(4), 6), round(c(100), 6)
    (0.3, 0.42, 3.3)
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
    if len(bs) == 1:
        start = 0.0
    else:
        fit_intercept = np.polyfit(bs, ts, 1)[1]
        start = ts[0] - (ts[1] - ts[0]) / (bs[1] - bs[0]) * bs[0]
        start = min(ts[0], max(start, fit_intercept, 0.0))
    xs = np.concatenate([[0.0], bs])
    ys = np.concatenate([[start], ts])
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])

    def curve(b):
        b = np.asarray(b, dtype=float)
        out = np.interp(b, xs, ys)
        out = np.where(b > xs[-1], ys[-1] + slope * (b - xs[-1]), out)
        return out if out.ndim else float(out)

    return curve


def _per_sample(b):
    return float(b)


@dataclass(frozen=True)
class TimeReference:
    """The reference time curve ``t_ref(b)``: what a throughput table reads and a worker's speed divides.

    The default is the unit curve ``t_ref(b) = b``, so times are in reference per-sample units.

    Attributes
    ----------
    curve : callable
        ``t_ref(b)``.
    linear : bool
        ``t_ref`` is proportional to the batch (an oracle, or the unit curve), which allows the closed-form split.
    unit : {"reference-sample", "s"}
    source : str
        Where the curve comes from, in words.

    Examples
    --------
    >>> ref = TimeReference()
    >>> ref.curve(4), ref.unit
    (4.0, 'reference-sample')
    """

    curve: Callable = _per_sample
    linear: bool = True
    unit: str = "reference-sample"
    source: str = "unit"


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
