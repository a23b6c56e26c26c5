"""Per-worker batch sizes for a heterogeneous cluster (LB-BSP, paper ``002_*``).

Given workers with memory caps ``bmax_i`` and time curves ``t_i(b)``, and a
global batch ``X``, choose integers ``b_i ≥ 0`` with ``Σ b_i = X`` and
``b_i ≤ bmax_i`` that minimise the iteration time ``max_i t_i(b_i)`` of
synchronous training (DESIGN §5).

- Linear curves ``t_i(b) = b / v_i`` (paper §3.2, CPU workers):
  :func:`split_proportional`, the closed form ``b_i = X·v_i / Σ v_j`` with
  largest-remainder rounding, clamping capped workers and sharing the rest
  among the others.
- Measured monotone curves (paper §3.3, GPU workers): :func:`split_exact`,
  binary search on the iteration time over the finite set of values the
  curves take, then the surplus taken back from the slowest workers first.

Each worker's gradient is weighted by ``n·b_i / X`` (paper §3.4, weighted
gradient aggregation) so the aggregate stays an unbiased mean.

Examples
--------
>>> split_proportional(128, [10, 20, 30, 40])
[13, 26, 38, 51]
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from dlsched.errors import DlschedError


def _check_total(total: int, caps: Sequence[int] | None, n: int) -> list[int]:
    if n < 1:
        raise DlschedError("a heterogeneous plan needs at least one worker")
    if total < 0:
        raise DlschedError(f"the global batch must be ≥ 0, got {total}")
    caps = [int(c) for c in caps] if caps is not None else [total] * n
    if len(caps) != n:
        raise DlschedError(f"{len(caps)} memory caps for {n} workers")
    if any(c < 0 for c in caps):
        raise DlschedError(f"worker batch caps must be ≥ 0, got {caps}")
    if sum(caps) < total:
        raise DlschedError(
            f"global batch {total} does not fit in the workers' memory: their largest batches "
            f"({', '.join(map(str, caps))}) add up to {sum(caps)}, the largest feasible global batch")
    return caps


def split_proportional(total: int, speeds: Sequence[float], caps: Sequence[int] | None = None) -> list[int]:
    """Closed-form split for linear curves ``t_i(b) = b / v_i``.

    ``b_i = X·v_i / Σ v_j`` over the workers not at their cap, with the
    capped ones clamped to ``bmax_i`` (repeated until no share exceeds its
    cap); fractional shares are rounded by largest remainder (ties: worker
    order), never above a cap.

    Parameters
    ----------
    total : int
        Global batch ``X``.
    speeds : sequence of float
        Samples per unit time ``v_i`` (> 0).
    caps : sequence of int, optional
        ``bmax_i``.

    Raises
    ------
    DlschedError
        ``X > Σ bmax_i`` (names the largest feasible ``X``) or a speed ≤ 0.

    Examples
    --------
    >>> split_proportional(10, [1, 1, 2], caps=[1, 10, 10])
    [1, 3, 6]
    """
    n = len(speeds)
    caps = _check_total(total, caps, n)
    if any(not (v > 0) or not math.isfinite(v) for v in speeds):
        raise DlschedError(f"worker speeds must be positive, got {list(speeds)}")
    share = [0.0] * n
    free = [i for i in range(n)]
    left = float(total)
    while free:
        vsum = sum(speeds[i] for i in free)
        over = [i for i in free if left * speeds[i] / vsum > caps[i]]
        if not over:
            for i in free:
                share[i] = left * speeds[i] / vsum
            break
        for i in over:
            share[i] = float(caps[i])
            left -= caps[i]
        free = [i for i in free if i not in over]
    batch = [min(caps[i], int(math.floor(share[i] + 1e-9))) for i in range(n)]
    rest = total - sum(batch)
    order = sorted(range(n), key=lambda i: (-(share[i] - batch[i]), i))
    while rest > 0:
        for i in order:
            if rest and batch[i] < caps[i]:
                batch[i] += 1
                rest -= 1
    return batch


def _values(curve: Callable, upto: int):
    import numpy as np

    b = np.arange(upto + 1)
    try:
        v = np.asarray(curve(b), dtype=float)
        if v.shape != b.shape:
            raise TypeError
    except Exception:  # a scalar-only curve
        v = np.array([float(curve(int(x))) for x in b])
    if not np.isfinite(v).all():
        raise DlschedError("a worker's time curve returned a non-finite time")
    if (np.diff(v) < -1e-12).any():
        raise DlschedError("worker time curves must be non-decreasing in the batch size")
    return v


def split_exact(total: int, curves: Sequence[Callable], caps: Sequence[int] | None = None) -> list[int]:
    """Optimal split for monotone (non-decreasing) curves ``t_i(b)``.

    The optimum iteration time ``T*`` is one of the values ``t_i(b)``; for a
    candidate ``T`` worker ``i`` can take up to ``n_i(T) = max{b ≤ bmax_i :
    t_i(b) ≤ T}`` samples, so ``T`` is feasible iff ``Σ n_i(T) ≥ X``. Binary
    search over the sorted candidates finds ``T*``; the surplus
    ``Σ n_i(T*) − X`` is then taken back one sample at a time from the worker
    whose current time is largest (ties: the later worker), which keeps the
    maximum at ``T*`` and lowers the other workers' times where it can. A
    worker given no samples takes no time.

    Raises
    ------
    DlschedError
        ``X > Σ bmax_i`` (names the largest feasible ``X``) or a decreasing curve.

    Examples
    --------
    >>> split_exact(6, [lambda b: 2 * b, lambda b: b])
    [2, 4]
    """
    import numpy as np

    n = len(curves)
    caps = _check_total(total, caps, n)
    vals = [_values(c, min(cap, total)) for c, cap in zip(curves, caps)]
    for v in vals:  # an idle worker (b = 0) takes no time, whatever its launch overhead
        v[0] = 0.0
    candidates = np.unique(np.concatenate(vals))

    def room(T):
        return [int(np.searchsorted(v, T, side="right")) - 1 for v in vals]

    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if sum(max(r, 0) for r in room(candidates[mid])) >= total and min(room(candidates[mid])) >= 0:
            hi = mid
        else:
            lo = mid + 1
    batch = [max(r, 0) for r in room(candidates[lo])]
    surplus = sum(batch) - total
    heap = [(-vals[i][batch[i]], -i) for i in range(n) if batch[i] > 0]
    heapq.heapify(heap)
    while surplus > 0:
        _, j = heapq.heappop(heap)
        i = -j
        batch[i] -= 1
        surplus -= 1
        if batch[i] > 0:
            heapq.heappush(heap, (-vals[i][batch[i]], -i))
    return batch


def equal_split(total: int, n: int) -> list[int]:
    """``X // n`` each, the first ``X % n`` workers one more (what plain BSP does)."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


@dataclass
class WorkerSpec:
    """One worker of a heterogeneous plan.

    ``curve`` is its time curve ``t(b)`` (seconds; monotone). ``linear`` says
    the curve is ``b / speed`` times a shared per-sample time, which allows the
    closed form.
    """

    name: str
    max_batch: int
    curve: Callable
    speed: float = 1.0
    memory: float | None = None
    linear: bool = True
    source: str = ""


@dataclass
class HeteroPlan:
    workers: list[WorkerSpec]
    global_batch: int
    batches: list[int]
    method: str
    equal: list[int] = field(default_factory=list)
    #: Seconds of transfers the workers' compute does not hide, added to every iteration (``None``: unknown,
    #: e.g. times from a unit curve or measured steps without transfers). The split does not depend on it.
    transfer_time: float | None = None

    def times(self, batches=None) -> list[float]:
        batches = self.batches if batches is None else batches
        return [float(w.curve(b)) if b > 0 else 0.0 for w, b in zip(self.workers, batches)]

    @property
    def iteration_time(self) -> float:
        """The slowest worker's compute, plus the exposed transfer time when known."""
        return max(self.times()) + (self.transfer_time or 0.0)

    @property
    def equal_split_time(self) -> float:
        return max(self.times(self.equal)) + (self.transfer_time or 0.0)

    @property
    def equal_split_violations(self) -> list[str]:
        """Workers whose equal share exceeds their memory cap."""
        return [w.name for w, b in zip(self.workers, self.equal) if b > w.max_batch]

    @property
    def removed(self) -> list[str]:
        """Workers the plan gives no samples: the cluster is faster without them (remove them)."""
        return [w.name for w, b in zip(self.workers, self.batches) if b == 0]

    def weights(self) -> list[float]:
        n, X = len(self.workers), self.global_batch
        return [n * b / X if X else 0.0 for b in self.batches]

    def frame(self):
        """Per-worker table: batch, predicted time, gradient weight, cap, equal share."""
        import pandas as pd

        times, eq_times = self.times(), self.times(self.equal)
        return pd.DataFrame([
            {"worker": w.name, "speed": w.speed, "memory": w.memory, "max_batch": w.max_batch,
             "batch": b, "time": t, "weight": wt, "equal_batch": e, "equal_time": et,
             "equal_fits": e <= w.max_batch}
            for w, b, t, wt, e, et in zip(self.workers, self.batches, times, self.weights(), self.equal, eq_times)])

    def summary(self):
        """Plan vs equal split (DataFrame)."""
        import pandas as pd

        return pd.DataFrame([
            {"split": f"plan ({self.method})", "iteration_time": self.iteration_time, "fits_memory": True},
            {"split": "equal", "iteration_time": self.equal_split_time,
             "fits_memory": not self.equal_split_violations},
        ])

    def to_dict(self) -> dict:
        eq = self.equal_split_time
        return {
            "global_batch": self.global_batch,
            "method": self.method,
            "workers": [
                {"name": w.name, "batch": b, "time": t, "weight": wt, "max_batch": w.max_batch,
                 "speed": w.speed, "memory": w.memory, "equal_batch": e}
                for w, b, t, wt, e in zip(self.workers, self.batches, self.times(), self.weights(), self.equal)],
            "iteration_time": self.iteration_time,
            "transfer_time": self.transfer_time,
            "equal_split_time": eq,
            "equal_split_fits_memory": not self.equal_split_violations,
            "equal_split_violations": self.equal_split_violations,
            "remove_workers": self.removed,
            "gain": eq / self.iteration_time if self.iteration_time > 0 else None,
        }


def plan_workers(workers: Sequence[WorkerSpec], global_batch: int, max_work: int | None = None) -> HeteroPlan:
    """Split ``global_batch`` over ``workers`` to minimise the iteration time.

    All-linear workers use the closed form (:func:`split_proportional` with
    ``v_i = 1 / t_i(1)``, samples per unit time); otherwise :func:`split_exact` on the curves.

    Parameters
    ----------
    workers : sequence of WorkerSpec
    global_batch : int
        ``X ≥ 1``.
    max_work : int, optional
        The exact split evaluates every curve at every batch a worker could
        take; more values than this are refused
        [default: :data:`dlsched.limits.PLAN_BATCH`].

    Raises
    ------
    DlschedError
        A global batch below 1, or above the sum of the workers' largest batches.
    WorkLimitError
        The exact split would evaluate more than ``max_work`` curve values.
    """
    from dlsched import limits

    if global_batch < 1:
        raise DlschedError(f"the global batch must be at least 1 sample, got {global_batch}")
    caps = [w.max_batch for w in workers]
    if all(w.linear for w in workers):
        # v_i = samples per unit time = 1 / t_i(1) (equals speed / t_ref(1) for speed-scaled curves)
        rates = [float(w.curve(1)) for w in workers]
        if any(not r > 0 for r in rates):
            raise DlschedError("a linear worker time curve must take positive time per sample")
        batches = split_proportional(global_batch, [1 / r for r in rates], caps)
        method = "closed-form"
    else:
        limits.check_work(limits.batch_search_work(caps, global_batch), limits.PLAN_BATCH,
                          "the exact batch split", max_work)
        batches = split_exact(global_batch, [w.curve for w in workers], caps)
        method = "exact"
    return HeteroPlan(list(workers), global_batch, batches, method, equal_split(global_batch, len(workers)))
