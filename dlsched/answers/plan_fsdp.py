"""The ``plan-fsdp`` answer: FSDP2 units, reshards and prefetch for a model under a memory budget (issue 30).

:func:`plan_fsdp` loads MODEL in training mode and its oracle, settles the
network as ``plan-ddp`` does (:func:`dlsched.answers.plan_ddp.network_of`),
runs :func:`dlsched.planning.fsdp_plan.plan_fsdp` and answers with a dict
(the ``--json`` output); ``write_plan`` writes the plan for
:func:`dlsched.hooks.fsdp.apply_plan` (:mod:`dlsched.formats.fsdp_plan_file`).

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> from dlsched.answers.options import ModelSpec, OracleSpec
>>> from dlsched.answers.plan_ddp import Link
>>> g, t = random_dag(20, 6, training=True, seed=1)
>>> out = plan_fsdp(ModelSpec.of(g), OracleSpec.of(t), Link(workers=2, bandwidth=1e8, latency=1e-4))
>>> out["plan"]["step_s"] <= out["default"]["step_s"]
True
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from dlsched.analyses.ddp_step import HostCosts
from dlsched.analyses.fsdp_step import FsdpNetwork
from dlsched.atomic import check_writable
from dlsched.formats.fsdp_plan_file import write_fsdp_plan
from dlsched.planning.fsdp_plan import FsdpCandidate, FsdpPlanResult, plan_file, plan_fsdp as make_plan
from dlsched.planning.memory import MARGIN, optimizer_copies

from .options import ModelSpec, OracleSpec, load_timed_model
from .plan_ddp import Link, network_of


@dataclass(frozen=True)
class FsdpOptions:
    """The memory budget per process (bytes; ``None``: none), the units (``None``: every granularity), the
    optimizer (its state per shard), the host's copy bandwidth (bytes/s) and the budget's share left free."""

    memory_bytes: float | None = None
    units: tuple[str, ...] | None = None
    optimizer: str = "sgd"
    copy_bandwidth: float = HostCosts().copy_bandwidth
    margin: float = MARGIN


def plan_fsdp(model: ModelSpec, oracle: OracleSpec, link: Link, options: FsdpOptions = FsdpOptions(),
              write_plan: str | None = None, max_work: int | None = None) -> dict:
    """Plan FSDP2 for MODEL (module docstring); the report as a dict.

    Raises
    ------
    DlschedError
        Fewer than 2 workers, both a measurement and given figures, an inference graph, a unit that is not
        a module with parameters, a budget below the smallest peak, an unwritable ``write_plan``; an oracle
        that misses ops (``OracleError``); more work than ``max_work`` (``WorkLimitError``).
    """
    check_writable(write_plan)
    if model.mode is None and not str(model.path).endswith(".dag.json"):
        model = replace(model, mode="training")
    graph, times = load_timed_model(model, oracle)
    alpha, beta, source = network_of(graph, times, link)
    net = FsdpNetwork(link.workers, alpha, beta, alpha, beta)
    result = make_plan(graph, times, net, options.memory_bytes, options.units, HostCosts(options.copy_bandwidth),
                       optimizer_copies(options.optimizer), max_work, options.margin)
    report = _report(graph.name, result, source, write_plan)
    if write_plan:
        write_fsdp_plan(plan_file(graph, result, {k: report[k] for k in ("default", "plan", "gain")}), write_plan)
    return report


def _figures(c: FsdpCandidate) -> dict:
    return {"label": c.label, "units": list(c.units), "kept_unsharded": c.kept, "prefetch_depth": c.depth,
            "unshard_async": c.schedule.unshard_async, **c.step.figures()}


def _report(name: str, r: FsdpPlanResult, source: str, write_plan: str | None) -> dict:
    net = r.network
    return {"model": name, "workers": net.workers, "alpha_s": net.ag_alpha, "beta_Bps": net.ag_beta,
            "network": source, "memory_budget_bytes": r.budget_bytes, "memory_margin": r.margin,
            "smallest_peak_bytes": r.smallest_peak_bytes,
            "default": _figures(r.default), "plan": _figures(r.plan), "gain": r.gain,
            "candidates": len(r.candidates), "plan_file": write_plan, "verdict": verdict(r)}


def verdict(r: FsdpPlanResult) -> str:
    """One sentence: what the plan changes and what it buys."""
    p, d = r.plan.step, r.default.step
    if r.gain < 1.01:
        return (f"FSDP2's default is as good as any schedule tried here ({r.gain:.3f}x): the step is "
                f"{'compute' if p.compute_s >= p.comm_s else 'communication'}-bound either way")
    fewer = d.figures()["all_gathers"] - p.figures()["all_gathers"]
    return (f"the plan takes the step from {d.step_s:.3g} s to {p.step_s:.3g} s ({r.gain:.3f}x): the exposed "
            f"communication from {d.exposed_comm_s:.3g} s to {p.exposed_comm_s:.3g} s"
            + (f", {fewer} all-gather{'s' if fewer > 1 else ''} fewer" if fewer > 0 else "")
            + f", at a peak of {p.peak_bytes / 2**20:.1f} MiB against {d.peak_bytes / 2**20:.1f} MiB")
