"""DDP's bucket plan and the ordered all-reduce's verdict for one model (issue 29 item 2, docs/plan-ddp.md).

:func:`plan_ddp` simulates DDP's steady-state step (:func:`dlsched.analyses.ddp_step.ddp_step`)
at a sweep of ``bucket_cap_mb`` values, DDP's default (25 MiB, the first
bucket 1 MiB) among them, and recommends the fastest, keeping the default
when it is within 1% (a setting nobody has to remember is worth 1%). It
says why the step takes what it takes:

- **compute-bound**: exposed communication is under 5% of the step, no cap
  does much;
- **latency-bound**: of the all-reduce time, the α terms (``2(P−1)·α`` per
  bucket for ring) are the larger part: fewer, larger buckets help;
- **bandwidth-bound**: the ``bytes/β`` terms are: the bytes are what they
  are, only overlap helps, which is where the order matters.

torch 2.13 caps the first bucket at 1 MiB only while ``bucket_cap_mb`` is
left at its default; a cap given by hand caps the first bucket too
(:func:`dlsched.analyses.ddp_buckets.ddp_buckets_of`), so the two settings
a user can ask for with ``bucket_cap_mb`` are the ones swept: each cap
``c`` (first bucket ``c``) and the default (first bucket 1 MiB).
``bucket_cap_mb_list`` (per-bucket caps) also buckets the first iteration
by size; it is not planned.

The ordered all-reduce (:mod:`dlsched.analyses.allreduce_order`) is
simulated at a sweep of piece sizes; its best (the largest piece size within
1% of the fastest, since each piece costs the hook more than the α the model
charges) is set against the
recommended stock step: the gain, and TicTac's ``S = (U − L)/L`` of the step
(the most any order can gain over the worst, §3.2).

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> from dlsched.analyses.ddp_step import Network
>>> g, t = random_dag(24, 8, training=True, seed=3)
>>> plan = plan_ddp(g, t, Network(alpha=1e-4, beta=2e8, workers=4))
>>> plan.recommended in plan.caps, plan.bound in BOUNDS
(True, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from dlsched.analyses.allreduce_order import OrderedSchedule, ordered_schedule
from dlsched.analyses.ddp_buckets import DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES, ddp_buckets_of
from dlsched import limits
from dlsched.analyses.ddp_step import ITERATIONS, HostCosts, Network, StepResult, ddp_step, ordered_step
from dlsched.dag import Graph
from dlsched.errors import DlschedError

_MB = 1024**2
#: Why a step takes its time.
BOUNDS = ("compute-bound", "latency-bound", "bandwidth-bound")
#: Exposed communication below this share of the step: compute-bound.
COMPUTE_BOUND_SHARE = 0.05
#: DDP's default is kept when within this of the fastest cap.
DEFAULT_TOLERANCE = 0.01
#: The ordered all-reduce pays when it gains at least this much.
PAYS_GAIN = 1.01
#: Piece sizes tried by default (bytes); the whole model is added.
DEFAULT_PIECES = (256 * 1024, 1 * _MB, 4 * _MB, 16 * _MB)


@dataclass(frozen=True)
class CapResult:
    """One ``bucket_cap_mb`` (``None``: DDP's default), its first bucket's cap, buckets and simulated step."""

    bucket_cap_mb: float | None
    first_bucket_bytes: int
    buckets: int
    step: StepResult

    @property
    def is_default(self) -> bool:
        return self.bucket_cap_mb is None

    @property
    def label(self) -> str:
        return "default (25, first 1)" if self.is_default else f"{self.bucket_cap_mb:g}"


@dataclass(frozen=True)
class PieceResult:
    """The ordered all-reduce at one piece size: its schedule and simulated step."""

    piece_bytes: int
    schedule: OrderedSchedule
    step: StepResult


@dataclass(frozen=True)
class DDPPlan:
    """What :func:`plan_ddp` found (module docstring)."""

    network: Network
    model_bytes: int
    caps: tuple[CapResult, ...]
    recommended: CapResult
    copying: StepResult  # the recommended cap with gradient_as_bucket_view=False
    bound: str
    ordered: tuple[PieceResult, ...]
    best_ordered: PieceResult

    @property
    def ordered_gain(self) -> float:
        """Recommended stock step / best ordered step."""
        return self.recommended.step.step_s / self.best_ordered.step.step_s

    @property
    def pays(self) -> bool:
        return self.ordered_gain >= PAYS_GAIN

    @property
    def ddp_kwargs(self) -> dict:
        """The keywords to pass to ``DistributedDataParallel`` (``bucket_cap_mb=None`` is DDP's default)."""
        return {"bucket_cap_mb": self.recommended.bucket_cap_mb, "gradient_as_bucket_view": True}


def default_caps(model_bytes: int) -> list[float]:
    """``bucket_cap_mb`` values swept by default: 1, 2, 4, … MiB up to the whole model (which is added).

    >>> default_caps(5 * 1024**2)
    [1.0, 2.0, 4.0, 5.0]
    """
    top = max(math.ceil(model_bytes / _MB * 1000) / 1000, 1.0)  # rounded up: one bucket holds it all
    caps, c = [], 1.0
    while c < top:
        caps.append(c)
        c *= 2
    return sorted(set(caps) | {top})


def default_piece_sizes(model_bytes: int) -> list[int]:
    """Piece sizes tried by default: :data:`DEFAULT_PIECES` below the model's size, and the whole model."""
    return sorted({p for p in DEFAULT_PIECES if p < model_bytes} | {max(int(model_bytes), 1)})


def _bound(step: StepResult) -> str:
    if step.exposed_comm_s < COMPUTE_BOUND_SHARE * step.step_s:
        return "compute-bound"
    return "latency-bound" if step.latency_s >= step.comm_s - step.latency_s else "bandwidth-bound"


def plan_ddp(graph: Graph, times: Mapping[str, float], network: Network, caps: Sequence[float] | None = None,
             piece_sizes: Sequence[int] | None = None, host: HostCosts = HostCosts(),
             priority: str = "tic", max_work: int | None = None) -> DDPPlan:
    """Sweep ``bucket_cap_mb`` and the ordered all-reduce's piece size for ``graph``; recommend (module docstring).

    Parameters
    ----------
    graph, times : Graph, mapping
        A training graph and its oracle (op name → seconds).
    network : Network
        α, β, the workers and the all-reduce algorithm.
    caps : sequence of float, optional
        ``bucket_cap_mb`` values (MiB); :func:`default_caps` when not given. DDP's default is always added.
    piece_sizes : sequence of int, optional
        The ordered all-reduce's piece sizes (bytes); :func:`default_piece_sizes` when not given.
    host : HostCosts
        Gradient copies and the optimizer (:class:`dlsched.analyses.ddp_step.HostCosts`).
    priority : str
        The ordered all-reduce's priorities (:data:`dlsched.analyses.allreduce_order.PRIORITIES`).
    max_work : int, optional
        Overrides :data:`dlsched.limits.PLAN_DDP`.

    Raises
    ------
    DlschedError
        An inference graph, fewer than 2 workers, a cap or piece size that is not positive.
    WorkLimitError
        More simulated op-steps than the budget, before any is simulated.
    """
    sends = graph.sends()
    if not sends:
        raise DlschedError(f"{graph.name} has no gradients to all-reduce: it is an inference graph; load it "
                           "with --mode training")
    model_bytes = sum(s.bytes for s in sends)
    caps = default_caps(model_bytes) if caps is None else list(caps)
    bad = [c for c in caps if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0)]
    if bad or not caps:
        raise DlschedError(f"bucket caps must be positive numbers of MiB, got {', '.join(map(str, bad)) or 'none'}")
    pieces = default_piece_sizes(model_bytes) if piece_sizes is None else list(piece_sizes)
    if not pieces or any(int(p) != p or p <= 0 for p in pieces):
        raise DlschedError(f"piece sizes must be positive whole numbers of bytes, got {list(pieces)}")
    sizes = sorted(set(int(p) for p in pieces))
    limits.check_work(limits.ddp_plan_work(len(graph), len(set(caps)),
                                           [-(-model_bytes // p) + len(sends) for p in sizes], ITERATIONS),
                      limits.PLAN_DDP, "plan-ddp", max_work)
    results = [_cap(graph, times, network, host, None)]
    results += [_cap(graph, times, network, host, float(c)) for c in sorted(set(caps))]
    fastest = min(results, key=lambda r: (r.step.step_s, r.bucket_cap_mb or 0.0))
    default = results[0]
    chosen = default if default.step.step_s <= fastest.step.step_s * (1 + DEFAULT_TOLERANCE) else fastest
    copying = ddp_step(graph, times, ddp_buckets_of(graph, chosen.bucket_cap_mb, times=times), network,
                       gradient_as_bucket_view=False, host=host)
    ordered = []
    for size in sizes:
        schedule = ordered_schedule(graph, times, size, network.cost, priority)
        ordered.append(PieceResult(size, schedule, ordered_step(graph, times, schedule.pieces, network, host)))
    # the largest piece within 1% of the fastest: each piece also costs the hook a hand-off to its thread, a
    # gather and a scatter that the model does not charge (measured: 256 KiB pieces of vgg_mid, 142 of them,
    # ran 0.25 s per step slower than predicted; 4 MiB pieces, 12, as predicted)
    fastest_ordered = min(r.step.step_s for r in ordered)
    best = max((r for r in ordered if r.step.step_s <= fastest_ordered * (1 + DEFAULT_TOLERANCE)),
               key=lambda r: r.piece_bytes)
    return DDPPlan(network, model_bytes, tuple(results), chosen, copying, _bound(chosen.step), tuple(ordered), best)


def _cap(graph: Graph, times: Mapping[str, float], network: Network, host: HostCosts,
         cap_mb: float | None) -> CapResult:
    buckets = ddp_buckets_of(graph, cap_mb, times=times)
    first = FIRST_BUCKET_BYTES if cap_mb is None else int(cap_mb * _MB)
    step = ddp_step(graph, times, buckets, network, gradient_as_bucket_view=True, host=host)
    return CapResult(cap_mb, min(first, DEFAULT_BUCKET_BYTES) if cap_mb is None else first, len(buckets), step)
