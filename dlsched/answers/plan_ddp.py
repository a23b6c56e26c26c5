"""The ``plan-ddp`` answer: DDP's ``bucket_cap_mb`` for a model, and whether the ordered all-reduce pays.

:func:`plan_ddp` loads MODEL (training mode unless told otherwise) and its
oracle, settles the network (given ``--bandwidth``/``--latency``, a real
measurement, or a fit to the oracle's transfers), runs
:func:`dlsched.planning.ddp_plan.plan_ddp` and answers with a dict (the
``--json`` output); ``write_order`` writes the best ordered all-reduce's
schedule (:mod:`dlsched.formats.allreduce_order_file`).

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> from dlsched.answers.options import ModelSpec, OracleSpec
>>> g, t = random_dag(20, 6, training=True, seed=1)
>>> out = plan_ddp(ModelSpec.of(g), OracleSpec.of(t), Link(workers=4, bandwidth=1e8, latency=1e-4))
>>> sorted(out["ddp_kwargs"])
['bucket_cap_mb', 'gradient_as_bucket_view']
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from dlsched.analyses.ddp_step import DEFAULT_COPY_BPS, HostCosts, Network
from dlsched.atomic import check_writable
from dlsched.errors import DlschedError
from dlsched.formats.allreduce_order_file import OrderFile, OrderPiece, write_order_file
from dlsched.planning.ddp_plan import DDPPlan, plan_ddp as make_plan

from .options import ModelSpec, OracleSpec, load_timed_model


@dataclass(frozen=True)
class Link:
    """The data-parallel job: ``workers`` processes, the network's β (``bandwidth``, bytes/s) and α
    (``latency``, s), or ``measure`` them (a real gloo transfer, ``timeout`` s per wait); what is neither
    given nor measured is fitted to the oracle's transfers. ``algorithm``: the all-reduce's."""

    workers: int
    bandwidth: float | None = None
    latency: float | None = None
    measure: bool = False
    algorithm: str = "ring"
    timeout: float = 30.0


@dataclass(frozen=True)
class Sweep:
    """What is swept and the host's costs: ``bucket_cap_mb`` values (MiB), the ordered all-reduce's piece sizes
    (bytes), its priority source, the copy bandwidth (bytes/s) and the optimizer's seconds per byte."""

    caps: tuple[float, ...] | None = None
    piece_bytes: tuple[int, ...] | None = None
    priority: str = "tic"
    copy_bandwidth: float = DEFAULT_COPY_BPS
    optimizer_s_per_byte: float | None = None


def plan_ddp(model: ModelSpec, oracle: OracleSpec, link: Link, sweep: Sweep = Sweep(),
             write_order: str | None = None, max_work: int | None = None) -> dict:
    """Plan DDP for MODEL (module docstring); the report as a dict.

    Raises
    ------
    DlschedError
        Fewer than 2 workers, both a measurement and given figures, an
        inference graph, a bad cap, piece size or network, an unwritable
        ``write_order``; an oracle that misses ops (``OracleError``); more work than ``max_work``
        (default :data:`dlsched.limits.PLAN_DDP`, ``WorkLimitError``).
    """
    if link.workers < 2:
        raise DlschedError(f"data parallelism needs at least 2 workers, got --workers {link.workers}")
    if link.measure and (link.bandwidth is not None or link.latency is not None):
        raise DlschedError("give either --measure-network or --bandwidth/--latency, not both")
    check_writable(write_order)
    if model.mode is None and not str(model.path).endswith(".dag.json"):
        model = replace(model, mode="training")
    graph, times = load_timed_model(model, oracle)
    alpha, beta, source = network_of(graph, times, link)
    network = Network(alpha, beta, link.workers, link.algorithm)
    plan = make_plan(graph, times, network, sweep.caps, sweep.piece_bytes,
                     HostCosts(sweep.copy_bandwidth, sweep.optimizer_s_per_byte), sweep.priority, max_work)
    if write_order:
        write_order_file(_order_file(graph, plan), write_order)
    return _report(graph.name, plan, source, write_order)


def network_of(graph, times, link: Link) -> tuple[float, float, str]:
    """α, β and where they came from: measured, given, or fitted to the oracle's transfers (what is not given).

    Raises
    ------
    DlschedError
        Both a measurement and given figures; a failed measurement.
    """
    if link.measure and (link.bandwidth is not None or link.latency is not None):
        raise DlschedError("give either --measure-network or --bandwidth/--latency, not both")
    if link.measure:
        from dlsched.profiling.network import measure_local

        m = measure_local(timeout=link.timeout)
        return m.latency, m.bandwidth, f"measured ({m.peer})"
    alpha, beta = link.latency, link.bandwidth
    if alpha is None or beta is None:
        from dlsched.analyses.ddp_buckets import network_from_oracle

        fit_alpha, fit_beta = network_from_oracle(graph, times)
        alpha = fit_alpha if alpha is None else alpha
        beta = fit_beta if beta is None else beta
        return alpha, beta, "fitted to the oracle's transfers" if link.latency is None and link.bandwidth is None \
            else "given, the rest fitted to the oracle's transfers"
    return alpha, beta, "given"


def _order_file(graph, plan: DDPPlan) -> OrderFile:
    best = plan.best_ordered
    return OrderFile(graph.name, graph.fingerprint(), plan.network.workers, best.piece_bytes,
                     [OrderPiece(p.slices, p.bytes, p.priority) for p in best.schedule.pieces])


def _report(name: str, plan: DDPPlan, source: str, write_order: str | None) -> dict:
    net, rec, best = plan.network, plan.recommended, plan.best_ordered
    caps = [{"bucket_cap_mb": c.bucket_cap_mb, "default": c.is_default, "first_bucket_bytes": c.first_bucket_bytes,
             "buckets": c.buckets, **c.step.figures()} for c in plan.caps]
    ordered = [{"piece_bytes": o.piece_bytes, "pieces": len(o.schedule.pieces), **o.step.figures()}
               for o in plan.ordered]
    return {"model": name, "workers": net.workers, "algorithm": net.algorithm, "alpha_s": net.alpha,
            "beta_Bps": net.beta, "network": source, "model_bytes": plan.model_bytes, "caps": caps,
            "recommended": caps[plan.caps.index(rec)], "bound": plan.bound, "why": why(plan),
            "ddp_kwargs": plan.ddp_kwargs,
            "gradient_as_bucket_view_false_step_s": plan.copying.step_s,
            "ordered": ordered, "ordered_best": ordered[plan.ordered.index(best)],
            "ordered_gain": plan.ordered_gain, "S": rec.step.speedup_bound, "ordered_pays": plan.pays,
            "verdict": verdict(plan), "order_file": write_order}


def why(plan: DDPPlan) -> str:
    """Why the recommended step takes its time, and what DDP's default would cost beside it."""
    step = plan.recommended.step
    share = step.exposed_comm_s / step.step_s if step.step_s else 0.0
    if plan.bound == "compute-bound":
        text = f"compute-bound: at this cap only {share:.1%} of the step waits for the network"
    elif plan.bound == "latency-bound":
        text = (f"latency-bound: {share:.1%} of the step waits for the network, and most of the all-reduce time "
                f"is its per-message latency ({step.latency_s / step.comm_s:.0%}): fewer, larger buckets help")
    else:
        text = (f"bandwidth-bound: {share:.1%} of the step waits for the network, and most of the all-reduce time "
                f"is moving bytes ({1 - step.latency_s / step.comm_s:.0%}): the cap changes little, only more "
                "overlap with compute (the order of the all-reduces) or a faster link does")
    default = next(c for c in plan.caps if c.is_default)
    if default is not plan.recommended:
        text += (f"; DDP's default takes {default.step.step_s / step.step_s - 1:.1%} longer, its {default.buckets} "
                 f"buckets leaving {default.step.exposed_comm_s * 1e3:.3g} ms of the all-reduce exposed")
    return text


def verdict(plan: DDPPlan) -> str:
    """One sentence: does the ordered all-reduce pay here."""
    gain, best = plan.ordered_gain, plan.best_ordered
    s = plan.recommended.step.speedup_bound
    if plan.pays:
        return (f"the ordered all-reduce pays: {gain:.2f}x over the recommended DDP setting with "
                f"{len(best.schedule.pieces)} pieces of at most {best.piece_bytes:,} bytes (any order gains at "
                f"most S = {s:.2f} over the worst)")
    return (f"the ordered all-reduce does not pay here ({gain:.2f}x; any order gains at most S = {s:.2f} over "
            "the worst): keep stock DDP")
