"""The batch with the most samples/s when algorithms compete for memory (paper ``003_*`` §3.1.3).

A larger batch amortises per-step overheads, but it also leaves less memory
for workspace, and at some batch the fast, memory-hungry algorithm of a layer
no longer fits (conv1's FFT in AlexNet): throughput rises, then drops (the
paper's Fig. 2). For each batch of a range, :func:`fastest_batch` takes the
memory left for workspace after parameters, optimizer state and activations,
solves Eq. 6 for the fastest algorithm per layer
(:func:`~dlsched.planning.algorithm_choice.choose_algorithms`), and reports the
step time and samples/s; the answer is the batch with the most samples/s.

As the paper asks (§3.1.1, after Hinton 2010), a batch must hold at least one
sample per class: batches below the number of classes are refused.

Examples
--------
One layer whose FFT needs 10 B of workspace per sample and GEMM 1 B, on a
1,000-byte device where each sample's activations take 10 B. FFT fits up to
batch 50; past it GEMM runs and throughput drops; at 100 nothing is left:

>>> import pandas as pd
>>> rows = [(layer, algo, b, overhead + b * per_sample, ws * b)
...         for b in (20, 40, 60, 80, 100)
...         for layer, algo, overhead, per_sample, ws in [("conv1", "gemm", 0.01, 0.002, 1),
...                                                       ("conv1", "fft", 0.01, 0.001, 10)]]
>>> table = pd.DataFrame(rows, columns=["layer", "algorithm", "batch", "time_s", "workspace_bytes"])
>>> result = fastest_batch(table, LinearMemory(capacity=1000, per_sample_bytes=10), (20, 100), num_classes=10)
>>> result.batch, result.algorithms, result.largest_feasible
(40, {'conv1': 'fft'}, 80)
>>> result.curve[["batch", "feasible", "samples_per_s", "algorithms"]]
   batch  feasible  samples_per_s algorithms
0     20      True     666.666667     (fft,)
1     40      True     800.000000     (fft,)
2     60      True     461.538462    (gemm,)
3     80      True     470.588235    (gemm,)
4    100     False            NaN       None
>>> result.curve["reason"][4]
'no algorithm choice fits the workspace left'
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from dlsched.errors import DlschedError

from .algorithm_choice import SUM, check_constraint, choose_algorithms, dominant_algorithms
from .memory import MemoryEstimate, fmt_bytes

CURVE_COLUMNS = ("batch", "workspace_left_bytes", "feasible", "reason", "algorithms", "workspace_bytes", "time_s",
                 "samples_per_s", "tradeoff")


@dataclass(frozen=True)
class LinearMemory:
    """Memory left for workspace at batch ``b``: ``capacity − (fixed_bytes + b·per_sample_bytes)``.

    DESIGN §5's linear memory model ``M(b) = fixed + b·per_sample`` on a
    device of ``capacity`` bytes: the paper's Eq. 5, device memory minus
    feature maps, parameters and the classifier's memory. Any callable ``batch → bytes`` serves
    :func:`fastest_batch` as well; this is the common one.

    Examples
    --------
    >>> LinearMemory(capacity=1000, fixed_bytes=100, per_sample_bytes=10)(5)
    850.0
    """

    capacity: float
    fixed_bytes: float = 0.0
    per_sample_bytes: float = 0.0

    def __post_init__(self):
        for name in ("capacity", "fixed_bytes", "per_sample_bytes"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0):
                raise DlschedError(f"the memory model's {name} must be a finite number of bytes ≥ 0, got {value!r}")
        if self.capacity <= 0:
            raise DlschedError(f"the device memory must be above 0 bytes, got {self.capacity!r}")

    @classmethod
    def from_estimate(cls, estimate: MemoryEstimate, capacity: float, margin: float = 0.1) -> "LinearMemory":
        """What a :class:`~dlsched.planning.memory.MemoryEstimate` leaves of ``capacity·(1 − margin)``.

        The estimate's optimizer-step peak is left out: it happens after the
        backward pass, when no layer's workspace is held.
        """
        if not 0 <= margin < 1:
            raise DlschedError(f"the memory margin must be in [0, 1), got {margin}")
        return cls(capacity * (1 - margin), max(estimate.state_bytes + estimate.fixed_bytes, 0.0),
                   estimate.per_sample_bytes)

    def __call__(self, batch: int) -> float:
        return float(self.capacity - self.fixed_bytes - batch * self.per_sample_bytes)


@dataclass(frozen=True)
class FastestBatch:
    """The batch with the most samples/s, and the curve it was chosen from.

    Attributes
    ----------
    batch : int
        The chosen batch; on equal samples/s, the smallest.
    samples_per_s, step_s : float
        Its throughput and step time (Σ of the chosen algorithms' times).
    algorithms : dict
        Layer → the algorithm chosen for it at ``batch``, in layer order.
    largest_feasible : int
        The largest batch of the range that fits and holds every class.
    constraint : {"sum", "max"}
        How workspaces added up (:mod:`~dlsched.planning.algorithm_choice`).
    num_classes : int
    tradeoff_layers : tuple of str
        Layers where, at some batch, no algorithm is both the fastest and the
        leanest. Empty means no trade-off exists (oneDNN's direct convolution
        on CPUs is the usual case): memory only decides whether a batch fits.
    curve : pandas.DataFrame
        One row per batch of the table inside the range (:data:`CURVE_COLUMNS`):
        the workspace left, ``feasible`` and, when not, the ``reason``, the
        algorithms per layer, the workspace they need, step time, samples/s,
        and whether a trade-off exists at that batch. Batches below the number
        of classes are shown with their figures but are not feasible.
    """

    batch: int
    samples_per_s: float
    step_s: float
    algorithms: dict
    largest_feasible: int
    constraint: str
    num_classes: int
    tradeoff_layers: tuple
    curve: object = field(repr=False)

    @property
    def no_tradeoff(self) -> bool:
        """True when one algorithm per layer is both fastest and leanest at every batch."""
        return not self.tradeoff_layers

    def to_dict(self) -> dict:
        curve = self.curve.replace({np.nan: None}).to_dict(orient="records")
        return {"batch": self.batch, "samples_per_s": self.samples_per_s, "step_s": self.step_s,
                "algorithms": self.algorithms, "largest_feasible": self.largest_feasible,
                "constraint": self.constraint, "num_classes": self.num_classes,
                "tradeoff_layers": list(self.tradeoff_layers), "no_tradeoff": self.no_tradeoff, "curve": curve}


def _check_inputs(batch_range, num_classes) -> tuple[int, int]:
    """``(lo, hi)`` after refusing ranges and class counts that mean nothing."""
    def whole(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if not (whole(num_classes) and num_classes >= 1):
        raise DlschedError(f"the number of classes must be a whole number ≥ 1, got {num_classes!r}")
    try:
        lo, hi = batch_range
    except (TypeError, ValueError):
        raise DlschedError(f"the batch range must be two whole numbers lo:hi, got {batch_range!r}") from None
    if not (whole(lo) and whole(hi) and 1 <= lo <= hi):
        raise DlschedError(f"the batch range must be whole numbers with 1 ≤ lo ≤ hi, got {lo!r}:{hi!r}")
    if hi < num_classes:
        raise DlschedError(
            f"every batch in {lo}:{hi} is below the number of classes ({num_classes}); paper 003 (§3.1.1, after "
            "Hinton 2010) asks for a batch of at least one sample per class for stable convergence. Raise the "
            f"range to reach {num_classes} or more.")
    return int(lo), int(hi)


def fastest_batch(table, memory_left: Callable[[int], float], batch_range: tuple[int, int], num_classes: int,
                  constraint: str = SUM) -> FastestBatch:
    """The batch of ``batch_range`` with the most samples/s, choosing each layer's algorithm by Eq. 6.

    Parameters
    ----------
    table : pandas.DataFrame
        An algorithm table (:mod:`dlsched.formats.algorithm_table`): time
        and workspace of each layer's algorithms at each batch. The batches
        evaluated are the table's batches inside the range, nothing in between.
    memory_left : callable
        ``batch → bytes`` left for workspace after parameters, gradients,
        optimizer state and activations, e.g. a :class:`LinearMemory`.
    batch_range : (int, int)
        ``lo, hi``, both included.
    num_classes : int
        Batches below it are refused (module docstring).
    constraint : {"sum", "max"}
        How workspaces add up; ``"sum"`` (the paper's Eq. 6) by default, for
        the reasons in :mod:`~dlsched.planning.algorithm_choice`.

    Returns
    -------
    FastestBatch

    Raises
    ------
    DlschedError
        A range or class count that means nothing, a range entirely below the
        number of classes, a table with no batch in the range, a
        ``memory_left`` that is not a number, or no batch that fits.
    """
    from dlsched.formats.algorithm_table import validate_algorithm_table

    check_constraint(constraint)
    lo, hi = _check_inputs(batch_range, num_classes)
    table = validate_algorithm_table(table)
    layers = list(dict.fromkeys(table["layer"]))
    inside = table[(table["batch"] >= lo) & (table["batch"] <= hi)]
    if inside.empty:
        raise DlschedError(f"the algorithm table lists no batch in {lo}:{hi} (it has batches "
                           f"{table['batch'].min()} to {table['batch'].max()})")
    position = {layer: k for k, layer in enumerate(layers)}
    rows, tradeoff_layers, lean = [], set(), {}
    for b, at_batch in inside.groupby("batch", sort=True):
        b = int(b)
        at_batch = at_batch.sort_values("layer", key=lambda s: s.map(position), kind="stable")
        per_layer = [g for _, g in at_batch.groupby("layer", sort=False)]  # every layer, in layer order
        left = _memory_left(memory_left, b)
        row, dominant = _at_batch(b, per_layer, left, constraint, num_classes)
        rows.append(row)
        tradeoff_layers.update(layers[k] for k, d in enumerate(dominant) if d is None)
        workspaces = [g["workspace_bytes"] for g in per_layer]
        lean[b] = (left, max(w.min() for w in workspaces), sum(w.min() for w in workspaces))
    import pandas as pd

    curve = pd.DataFrame(rows, columns=list(CURVE_COLUMNS))
    feasible = curve[curve["feasible"]]
    if feasible.empty:
        raise _nothing_fits(curve, lean, lo, hi, num_classes, constraint)
    best = feasible.loc[feasible["samples_per_s"].idxmax()]  # first maximum: the smallest batch
    return FastestBatch(
        batch=int(best["batch"]), samples_per_s=float(best["samples_per_s"]), step_s=float(best["time_s"]),
        algorithms=dict(zip(layers, best["algorithms"])), largest_feasible=int(feasible["batch"].max()),
        constraint=constraint, num_classes=num_classes,
        tradeoff_layers=tuple(layer for layer in layers if layer in tradeoff_layers), curve=curve)


def _at_batch(batch: int, per_layer: list, left: float, constraint: str, num_classes: int) -> tuple[dict, list]:
    """The curve's row at ``batch``: the Eq. 6 choice for ``left`` bytes; also each layer's dominant algorithm."""
    times = [g["time_s"].to_numpy() for g in per_layer]
    workspaces = [g["workspace_bytes"].to_numpy() for g in per_layer]
    choice = choose_algorithms(times, workspaces, left, constraint)
    dominant = dominant_algorithms(times, workspaces)
    reason = ("parameters and activations alone exceed the memory" if left < 0
              else "no algorithm choice fits the workspace left" if choice is None
              else f"fewer samples than the {num_classes} classes" if batch < num_classes else "")
    row = {"batch": batch, "workspace_left_bytes": left, "feasible": not reason, "reason": reason,
           "algorithms": None, "workspace_bytes": np.nan, "time_s": np.nan, "samples_per_s": np.nan,
           "tradeoff": any(d is None for d in dominant)}
    if choice is not None:
        row.update(algorithms=tuple(g["algorithm"].iat[a] for g, a in zip(per_layer, choice.algorithms)),
                   workspace_bytes=choice.workspace, time_s=choice.time, samples_per_s=batch / choice.time)
    return row, dominant


def _memory_left(memory_left: Callable[[int], float], batch: int) -> float:
    try:
        left = float(memory_left(batch))
    except (TypeError, ValueError):
        left = math.nan
    if math.isnan(left) or left == math.inf:
        raise DlschedError(f"the memory left for workspace at batch {batch} is {left}, not a finite number of bytes; "
                           "check the device memory and the model's memory figures")
    return left


def _nothing_fits(curve, lean: dict, lo: int, hi: int, num_classes: int, constraint: str) -> DlschedError:
    """The refusal when no batch of the range fits: what the smallest allowed batch needs against what is left."""
    allowed = curve[curve["batch"] >= num_classes]
    if allowed.empty:
        return DlschedError(f"the algorithm table lists no batch of at least {num_classes} (the number of classes) "
                            f"in {lo}:{hi}; paper 003 (§3.1.1) asks for at least one sample per class")
    b = int(allowed["batch"].iat[0])
    left, need_max, need_sum = lean[b]
    need = need_sum if constraint == SUM else need_max
    how = ("the sum of each layer's leanest, as in the paper's Eq. 6" if constraint == SUM
           else "the largest of the layers' leanest")
    short = (f"{fmt_bytes(left)} is left after parameters, optimizer state and activations" if left >= 0 else
             f"parameters, optimizer state and activations alone exceed the memory by {fmt_bytes(-left)}")
    return DlschedError(
        f"no batch in {lo}:{hi} with at least {num_classes} samples (one per class) fits: at batch {b}, the "
        f"smallest allowed, the layers need at least {fmt_bytes(need)} of workspace ({how}) but {short}. Lower "
        "the batch range, use a device with more memory, or, if the framework reuses one workspace buffer for "
        "every layer, the max constraint.")
