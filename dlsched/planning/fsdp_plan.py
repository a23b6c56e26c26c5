"""FSDP2 planned the TicTac way: units, what stays unsharded, how far ahead to all-gather, under a memory budget (issue 30).

Every FSDP2 unit is all-gathered before its forward and, if it was
resharded, again before its backward: TicTac's parameter transfers under
another name (paper ``000_*`` §4). Their order is fixed by the program; what
a plan chooses is how early each is issued and which are not issued twice,
and both cost memory. The planner tries, for each unit granularity:

- **which units stay unsharded after forward** (``reshard_after_forward =
  False``), in TicTac's priority order for backward: backward needs the
  last forward units first, with the least compute before them to hide
  their all-gathers behind, so the last ``m`` units of forward order are
  kept, for every ``m`` from 0 to all of them;
- **how far ahead** all-gathers are issued: FSDP2's default (on CPU every
  all-gather blocks: :mod:`dlsched.analyses.fsdp_step`), or async
  all-gathers with explicit prefetch of the next ``d`` units in forward and
  the previous ``d`` in backward, ``d`` ∈ :data:`PREFETCH_DEPTHS` each way
  (the root prefetches the first units in forward and the last in backward).

Each candidate is one simulated step (:func:`~dlsched.analyses.fsdp_step.fsdp_step`);
the plan is the fastest whose peak memory fits the budget less a headroom
(:data:`dlsched.planning.memory.MARGIN`, ties: the lower peak). Why the headroom: a real process's
peak moves from run to run (FSDP2's default on vgg_mid's 11 finer units
measured 157–167 MiB, a plan predicted at 179.8 MiB 180–202 MiB, 2 processes
on gloo), so a plan predicted just under the budget went over it in 2 runs of 3;
plan-batch keeps the same 10% free (DESIGN §5). **Granularities**
(:func:`unit_candidates`): the module paths at each depth of the parameters' names that give at least two units (the root owns
what lies above), or the one list the user gives.

The baseline it is set against is FSDP2's default on the plan's units:
every unit resharded, no explicit prefetch, blocking all-gathers.

Examples
--------
>>> unit_candidates(["embed.weight", "layers.0.fc.weight", "layers.1.fc.weight", "head.weight"])
[['embed', 'head', 'layers'], ['layers.0', 'layers.1'], ['layers.0.fc', 'layers.1.fc']]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from dlsched import limits
from dlsched.analyses.ddp_step import HostCosts
from dlsched.analyses.fsdp_step import FsdpMemory, FsdpNetwork, FsdpSchedule, FsdpStepResult, fsdp_step
from dlsched.analyses.fsdp_units import ROOT, FsdpUnit, fsdp_units
from dlsched.dag import Graph
from dlsched.errors import DlschedError
from dlsched.formats.fsdp_plan_file import FsdpPlan, parameter_fingerprint

from .memory import MARGIN, check_margin, fmt_bytes, saved_activations

#: Explicit prefetch depths tried each way (with async all-gathers).
PREFETCH_DEPTHS = (1, 2)
#: Deepest module level tried for units.
MAX_DEPTH = 3


@dataclass(frozen=True)
class FsdpCandidate:
    """One simulated choice: the units (non-root module paths, forward order), the schedule, the step."""

    units: tuple[str, ...]
    schedule: FsdpSchedule
    step: FsdpStepResult
    kept: int = 0
    depth: int = 0  # prefetch depth; 0: FSDP2's default

    @property
    def label(self) -> str:
        how = "FSDP2 default (blocking all-gathers)" if not self.depth else \
            f"async all-gathers, prefetch {self.depth} ahead"
        return f"{len(self.units)} units, last {self.kept} kept unsharded, {how}"


@dataclass(frozen=True)
class FsdpPlanResult:
    """The plan, FSDP2's default on the same units, every candidate tried, the budget and the smallest peak."""

    plan: FsdpCandidate
    default: FsdpCandidate
    candidates: tuple[FsdpCandidate, ...]
    budget_bytes: float | None
    smallest_peak_bytes: float
    network: FsdpNetwork
    margin: float = MARGIN

    @property
    def gain(self) -> float:
        return self.default.step.step_s / self.plan.step.step_s


def module_paths(params: Sequence[str], depth: int) -> list[str]:
    """The distinct module paths of ``depth`` components that hold a parameter below them (sorted)."""
    out = set()
    for p in params:
        parts = p.split(".")[:-1]  # the parameter's own attribute name is not a module
        if len(parts) >= depth:
            out.add(".".join(parts[:depth]))
    return sorted(out)


def unit_candidates(params: Sequence[str], max_depth: int = MAX_DEPTH) -> list[list[str]]:
    """Unit lists to try: the module paths at each depth, where they give at least two units (module docstring)."""
    seen, out = set(), []
    for d in range(1, max_depth + 1):
        paths = module_paths(params, d)
        if len(paths) >= 2 and tuple(paths) not in seen:
            seen.add(tuple(paths))
            out.append(paths)
    return out


def schedules(units: Sequence[FsdpUnit]) -> list[tuple[int, int, FsdpSchedule]]:
    """``(kept, depth, schedule)`` for every candidate of one unit list (module docstring)."""
    order = [u.module for u in units if u.module != ROOT]
    has_root = any(u.module == ROOT for u in units)
    out = []
    for kept in range(len(order) + 1):
        reshard = {m: i < len(order) - kept for i, m in enumerate(order)}
        out.append((kept, 0, FsdpSchedule(reshard)))
        for d in PREFETCH_DEPTHS:
            fwd = {m: order[i + 1:i + 1 + d] for i, m in enumerate(order)}
            bwd = {m: order[max(0, i - d):i][::-1] for i, m in enumerate(order)}
            if has_root:
                fwd[ROOT], bwd[ROOT] = order[:d], order[::-1][:d]
            out.append((kept, d, FsdpSchedule(reshard, fwd, bwd, unshard_async=True)))
    return out


def fsdp_memory(graph: Graph, optimizer_copies: int = 0) -> FsdpMemory:
    """The memory sweep's inputs from ``plan-batch``'s model (DESIGN §5): the saved activations. Its
    workspace term is left out (:mod:`dlsched.analyses.fsdp_step` says why)."""
    activations, _ = saved_activations(graph)
    return FsdpMemory(activations, optimizer_copies)


def plan_fsdp(graph: Graph, times: Mapping[str, float], network: FsdpNetwork, memory_bytes: float | None = None,
              units: Sequence[str] | None = None, host: HostCosts = HostCosts(), optimizer_copies: int = 0,
              max_work: int | None = None, margin: float = MARGIN) -> FsdpPlanResult:
    """The fastest FSDP2 schedule of ``graph`` whose peak memory fits ``memory_bytes · (1 − margin)``
    (module docstring).

    Parameters
    ----------
    units : sequence of str, optional
        The module paths to make units; by default every granularity of :func:`unit_candidates` is tried.
    margin : float
        The share of ``memory_bytes`` left free, in [0, 1).

    Raises
    ------
    DlschedError
        An inference graph, fewer than 2 processes, a unit that is not a module with parameters, a budget
        that is not a positive number of bytes, or one below the smallest peak any candidate reaches.
    WorkLimitError
        More simulated op-steps than :data:`dlsched.limits.PLAN_FSDP` (or ``max_work``).
    """
    if memory_bytes is not None and not (0 < memory_bytes < float("inf")):
        raise DlschedError(f"the memory budget must be a finite number of bytes above 0, got {memory_bytes}")
    check_margin(margin)
    params = [op.name for op in graph.recvs()]
    grains = [list(units)] if units is not None else (unit_candidates(params) or [[]])
    unit_lists = [fsdp_units(graph, g, network.workers) for g in grains]
    n_sched = 1 + 2 * len(PREFETCH_DEPTHS)
    limits.check_work(limits.fsdp_plan_work(len(graph.compute_ops()), [len(u) for u in unit_lists], n_sched),
                      limits.PLAN_FSDP, "plan-fsdp", max_work)
    memory = fsdp_memory(graph, optimizer_copies)
    tried: list[FsdpCandidate] = []
    for us in unit_lists:
        names = tuple(u.module for u in us if u.module != ROOT)
        for kept, depth, sched in schedules(us):
            step = fsdp_step(graph, times, us, sched, network, host, memory)
            tried.append(FsdpCandidate(names, sched, step, kept, depth))
    best_peak = min(tried, key=lambda c: c.step.peak_bytes)
    smallest = best_peak.step.peak_bytes
    usable = None if memory_bytes is None else memory_bytes * (1 - margin)
    fits = [c for c in tried if usable is None or c.step.peak_bytes <= usable]
    if not fits:
        raise DlschedError(f"no FSDP schedule of {graph.name} fits {fmt_bytes(memory_bytes)} per process less "
                           f"{margin:.0%} headroom ({fmt_bytes(usable)}): the smallest predicted peak is "
                           f"{fmt_bytes(smallest)} ({best_peak.label}); give a larger --memory, a smaller --margin, "
                           "more --workers (smaller shards), or a smaller batch")
    plan = min(fits, key=lambda c: (round(c.step.step_s, 12), c.step.peak_bytes))
    default = next(c for c in tried if c.units == plan.units and c.kept == 0 and c.depth == 0)
    return FsdpPlanResult(plan, default, tuple(tried), memory_bytes, smallest, network, margin)


def plan_file(graph: Graph, result: FsdpPlanResult, predicted: dict | None = None) -> FsdpPlan:
    """The plan as :func:`dlsched.hooks.fsdp.apply_plan` reads it, fingerprinted with ``graph``'s parameters."""
    s = result.plan.schedule
    fp = parameter_fingerprint((op.name, op.shape or []) for op in graph.recvs())
    return FsdpPlan(graph.name, fp, result.network.workers, [(m, s.reshards(m)) for m in result.plan.units],
                    {k: list(v) for k, v in s.forward_prefetch.items() if v},
                    {k: list(v) for k, v in s.backward_prefetch.items() if v}, s.unshard_async, predicted or {})
