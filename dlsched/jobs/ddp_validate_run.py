"""Real DDP at a sweep of bucket caps, simulated at the same caps (DESIGN §4.8): ``dlsched validate --dp ddp``'s job.

:func:`run_ddp_validation`:

1. **A profile** of the model's training step with the cluster's intra-op
   threads per process (:func:`dlsched.jobs.in_situ_oracle.in_situ_oracle`):
   the shape of the step, op by op, which places each gradient in backward.
2. **Hosts** (:func:`dlsched.runtime.hosts.open_hosts`): as root one network
   namespace per rank on a bridge, rank 0's link shaped by ``tc`` (every ring
   step crosses it, so it paces the whole ring); ``--rate auto`` picks the rate
   at which the all-reduce of the whole gradient takes as long as backward,
   where the bucket cap matters most (:func:`pick_ddp_rate`).
3. **The sweep** (:mod:`dlsched.jobs.ddp_caps_run`): torch's own
   ``DistributedDataParallel`` at every cap, interleaved one step each, with a
   calibration step per round (no all-reduce) and gloo's all-reduce timed at
   a range of sizes on the same hosts.
4. **The prediction** of each cap (:func:`dlsched.analyses.ddp_step.ddp_step`):
   the profile's forward and backward scaled to end where the cluster's last
   rank ended each in the calibration steps, the optimizer's measured time, DDP's
   buckets at that cap (:func:`~dlsched.analyses.ddp_buckets.ddp_buckets_of`)
   and the ring's α, β from the timed all-reduces (:func:`fit_ring`).

Examples
--------
>>> pick_ddp_rate(compute=0.5, model_bytes=50e6, workers=2)
'800mbit'
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from dlsched import limits
from dlsched.analyses.calibration import cluster_contention, cluster_phases
from dlsched.analyses.ddp_step import HostCosts, Network
from dlsched.analyses.validate import relative_error
from dlsched.errors import DlschedError
from dlsched.importers.loader import detect_format, load_model
from dlsched.planning.ddp_plan import DDPPlan, default_caps, plan_ddp
from dlsched.profiling.network import LinkMeasurement
from dlsched.runtime import netns
from dlsched.runtime.hosts import open_hosts

from .ddp_caps_run import BESIDE, CALIBRATION, run_caps, slot_name
from .in_situ_oracle import in_situ_oracle
from .ordered_run import OrderedRun, run_ordered

_MB = 2**20
#: profiled runs per op: the profile gives the step's shape; its level comes from the cluster
PROFILE_RUNS = 5
#: steps per block of the DDP-against-ordered job (the period is measured over the steps between its second and last)
ORDERED_BLOCK = 6
#: the most slots one sweep runs (each cap is a replica of the model in every rank)
MAX_CAPS = 12


def pick_ddp_rate(compute: float, model_bytes: float, workers: int) -> str:
    """The ``tc`` rate at which a ring all-reduce of the whole gradient (``2(P−1)/P`` of it crosses each link
    each way) takes ``compute`` seconds: communication as long as the step's compute, where the buckets'
    overlap with backward decides the step time. Rounded to 100 mbit, at least 100 mbit."""
    per_link = 2 * (workers - 1) / workers * model_bytes
    mbit = per_link * 8 / max(compute, 1e-6) / 1e6
    return f"{max(100, int(round(mbit / 100.0)) * 100)}mbit"


#: timed all-reduces of at least this many bytes give the bandwidth; those below 256 KiB the latency
BANDWIDTH_BYTES, LATENCY_BYTES = 2**20, 2**18


def fit_ring(sizes: Sequence[int], secs: Sequence[float], workers: int) -> Network:
    """α and β of the ring all-reduce ``2(P−1)·α + 2(P−1)/P · n/β`` through timed all-reduces.

    The bandwidth is the slope of a least-squares line ``time = a + n·b`` through the sizes of at least
    1 MiB (all of them when fewer than two are that large): small all-reduces are all latency, and their
    scatter of a millisecond or so would tilt the slope. The latency ``a`` is the median of the small
    sizes' times less their bytes' share ``n·b`` (the line's intercept when none is small). Then
    ``α = a / 2(P−1)``, ``β = 2(P−1) / (P·b)``.

    Raises
    ------
    DlschedError
        The times do not grow with the size.
    """
    a, b = fit_line(sizes, secs, "all-reduces")
    steps = 2 * (workers - 1)
    return Network(alpha=a / steps, beta=steps / (workers * b), workers=workers)


def fit_line(sizes: Sequence[int], secs: Sequence[float], what: str = "collectives") -> tuple[float, float]:
    """``(a, b)`` of ``time = a + n·b`` through timed collectives (:func:`fit_ring`): the slope through the
    sizes of at least 1 MiB, the intercept from the sizes below 256 KiB; ``a ≥ 0``, ``b > 0``.

    Raises
    ------
    DlschedError
        The times do not grow with the size.
    """
    n, t = np.asarray(sizes, dtype=float), np.asarray(secs, dtype=float)
    big = n >= BANDWIDTH_BYTES
    if big.sum() < 2:
        big = np.ones_like(n, dtype=bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a poorly conditioned fit is caught by the test below
        b, a = np.polyfit(n[big], t[big], 1)
    if not b > 0:
        raise DlschedError(f"the timed {what} do not grow with their size, so they give no bandwidth; "
                           "the link is too fast or too noisy to measure")
    small = n < LATENCY_BYTES
    if small.any():
        a = float(np.median(t[small] - n[small] * b))
    return max(float(a), 0.0), float(b)


def allreduce_sizes(model_bytes: float) -> list[int]:
    """Sizes at which the all-reduce is timed: 4 KiB up to the whole gradient, by factors of 4."""
    sizes, n = [], 4096
    while n < model_bytes:
        sizes.append(n)
        n *= 4
    return sizes + [int(model_bytes)]


@dataclass
class CapRow:
    """One cap: the buckets DDP made, the measured steps (seconds, one per round: the slowest rank's, in the
    order they ran), the predicted step and the error of the prediction against their mean."""

    cap_mb: float | None
    buckets: int
    steps: list
    predicted: float
    figures: dict = field(default_factory=dict)

    @property
    def measured_mean(self) -> float:
        return float(np.mean(self.steps))

    @property
    def measured_median(self) -> float:
        return float(np.median(self.steps))

    @property
    def measured_p95(self) -> float:
        return float(np.percentile(self.steps, 95))

    @property
    def error(self) -> float:
        return relative_error(self.predicted, self.measured_mean)


@dataclass
class DDPValidation:
    model: str
    workers: int
    batch: int
    threads: int
    hosts: dict
    rows: list
    network: Network
    allreduce: dict
    compute_s: float
    optimizer_s: float
    profile_scale: float
    iterations: int
    wall_s: float
    plan: DDPPlan | None = None
    ordered: OrderedRun | None = None
    #: (compute beside an all-reduce, all-reduce beside compute) slow-downs, fitted on the beside steps
    contention: tuple = (1.0, 1.0)
    #: bytes per second of a gradient-sized copy, every rank at once (the hooks' divisions and copies)
    copy_bps: float = 10e9
    #: what one collective of a stream costs beside backward beyond its time alone (``HostCosts.per_piece_s``)
    collective_excess_s: float = 0.0


def _check(model, workers, caps, iterations, warmup, max_work):
    if detect_format(model) != "torch":
        raise DlschedError(f"validate --dp ddp runs torch's DistributedDataParallel; {model!r} is not a PyTorch "
                           "factory (path/file.py:fn or package.module:fn)")
    if workers < 2:
        raise DlschedError(f"--dp ddp needs at least 2 workers to all-reduce between, got {workers}")
    if caps is not None and (not caps or any(not (0 < c < float("inf")) for c in caps)):
        raise DlschedError(f"--caps takes bucket caps in MiB above 0, got {list(caps)}")
    if caps is not None and len(set(caps)) + 1 > MAX_CAPS:
        raise DlschedError(f"--caps takes at most {MAX_CAPS - 1} caps (each is a replica of the model in every "
                           f"rank), got {len(set(caps))}")
    limits.check_work(limits.ranks_work(workers, limits.plural(workers, "worker")), limits.RANKS, "validate",
                      max_work)
    slots = (len(caps) + 1 if caps else MAX_CAPS) + 1
    limits.check_work(limits.cluster_work(slots, iterations, warmup), limits.CLUSTER, "validate", max_work)


def run_ddp_validation(model: str, *, workers: int = 2, rate: str | None = "auto", caps: Sequence[float] | None = None,
                       batch: int = 8, threads: int = 1, network: str = "auto", iterations: int = 20,
                       warmup: int = 3, ordered: bool = True, timeout: float = 900.0, max_work: int | None = None,
                       say: Callable[[str], None] = lambda s: None) -> DDPValidation:
    """Run ``model`` under torch's DDP at each bucket cap, and predict each (module docstring).

    Raises
    ------
    DlschedError
        Bad settings or too much work (before any process starts), a model that
        is not a PyTorch factory, a failed profile or rank.
    """
    _check(model, workers, caps, iterations, warmup, max_work)
    if rate not in (None, "auto"):
        netns.tc_rate_bytes(rate)
    t0 = time.monotonic()
    graph = load_model(model, mode="training", batch=batch)
    model_bytes = float(sum(s.bytes for s in graph.sends()))
    caps = sorted({float(c) for c in caps}) if caps else default_caps(int(model_bytes))
    slots = [None, *caps]  # DDP's default first
    say(f"profiling the training step with {threads} thread(s) per process")
    oracle = in_situ_oracle(model, graph, LinkMeasurement(1e12, 0.0, "none"), threads, runs=PROFILE_RUNS)
    if rate == "auto" and (network == "localhost" or not netns.available()):
        rate = None
    if rate == "auto":
        rate = pick_ddp_rate(oracle.compute, model_bytes, workers)
        say(f"picked rate {rate} (a ring all-reduce of the whole gradient as long as the step's compute)")
    hosts = open_hosts(network, workers, rate)
    try:
        say(f"hosts: {hosts.note}")
        say(f"running DDP at its default and at caps {', '.join(f'{c:g}' for c in caps)} MiB, interleaved one "
            f"step each with three calibration steps (alone, beside an all-reduce, beside a stream of small ones): "
            f"{warmup} + {iterations} rounds of {len(slots) + 3}")
        run = run_caps(model, slots, workers=workers, batch=batch, threads=threads, iterations=iterations,
                       warmup=warmup, allreduce_bytes=allreduce_sizes(model_bytes), timeout=timeout, hosts=hosts)
        host_info = {"kind": hosts.kind, "rate": hosts.rate, "note": hosts.note}
        plan, fitted = _plan(graph, oracle, run, caps, model_bytes, workers)
        measured_ordered = None
        if ordered:
            say(f"running stock DDP (bucket_cap_mb={plan.recommended.label}) against the ordered all-reduce "
                f"({len(plan.best_ordered.schedule.pieces)} pieces of up to {plan.best_ordered.piece_bytes} bytes) "
                f"in alternating blocks of {ORDERED_BLOCK} steps: {warmup} + {iterations} rounds")
            measured_ordered = run_ordered(model, workers=workers, batch=batch, threads=threads,
                                           bucket_cap_mb=plan.recommended.bucket_cap_mb,
                                           pieces=plan.best_ordered.schedule.pieces, rounds=iterations,
                                           warmup=max(1, warmup), block=ORDERED_BLOCK, timeout=timeout, hosts=hosts)
    finally:
        hosts.close()
    net, compute, optimizer, scale, contention = fitted
    rows = []
    for c in plan.caps:
        measured = run.step_times(slot_name(c.bucket_cap_mb))
        rows.append(CapRow(c.bucket_cap_mb, c.buckets, [float(x) for x in measured], c.step.step_s,
                           c.step.figures()))
    timed = {"bytes": list(run.allreduce_bytes), "seconds": [float(s) for s in run.allreduce_s.mean(axis=1)]}
    return DDPValidation(model, workers, batch, threads, host_info, rows, net, timed, compute, optimizer, scale,
                         iterations, time.monotonic() - t0, plan, measured_ordered, contention,
                         run.copy_bps, run.collective_excess_s)


def _plan(graph, oracle, run, caps, model_bytes, workers):
    """plan-ddp on what the sweep measured: the profile's forward and backward each scaled to the cluster's in
    the calibration steps (:func:`~dlsched.analyses.calibration.cluster_phases`), the
    optimizer's measured time, the ring fitted to the timed all-reduces, and backward and the all-reduce
    slowing each other as in the beside steps, on the same envelope of the ranks
    (:func:`~dlsched.analyses.calibration.cluster_contention`), and each piece of the ordered all-reduce
    charged what a stream's collective costs beside backward beyond its time alone."""
    calib, beside = run.steps[CALIBRATION], run.steps[BESIDE]
    forward, backward = cluster_phases(calib[:, :, 3], calib[:, :, 0])
    compute = forward + backward
    optimizer = float(np.median(calib[:, :, 1].max(axis=1)))
    scale = compute / oracle.compute
    times = _phase_scaled(graph, oracle.times, forward, backward)
    secs = run.allreduce_s.mean(axis=1)
    net = fit_ring(run.allreduce_bytes, secs, workers)
    f, g = cluster_contention(calib[:, :, 3], calib[:, :, 0], beside[:, :, 3], beside[:, :, 0], beside[:, :, 4],
                              float(secs[-1]))
    host = HostCosts(run.copy_bps, optimizer / model_bytes, compute_beside_comm=f, comm_beside_compute=g,
                     per_piece_s=run.collective_excess_s)
    plan = plan_ddp(graph, times, net, caps=caps, host=host)
    return plan, (net, compute, optimizer, scale, (f, g))


def _phase_scaled(graph, times, forward: float, backward: float) -> dict:
    """``times`` with the forward ops scaled to sum to ``forward`` seconds and the backward ops to ``backward``
    (a phase the profile has no time for keeps its ops' times)."""
    out = dict(times)
    for phase, target in (("forward", forward), ("backward", backward)):
        ops = [op.name for op in graph.compute_ops() if op.phase == phase]
        total = sum(out[n] for n in ops)
        for n in ops:
            out[n] *= target / total if total > 0 else 1.0
    return out
