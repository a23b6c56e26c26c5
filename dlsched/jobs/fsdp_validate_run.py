"""Real FSDP2, FSDP2's default against ``plan-fsdp``'s plan, simulated alike (issue 30, DESIGN §4.10).

``dlsched validate MODEL --dp fsdp``'s job, :func:`run_fsdp_validation`:

1. **A profile** of the training step with the cluster's threads per process
   (:func:`dlsched.jobs.in_situ_oracle.in_situ_oracle`): the step's shape.
2. **The plan** (:func:`dlsched.planning.fsdp_plan.plan_fsdp`) on that
   profile, with the link's rate as β and :data:`GUESS_ALPHA`: a choice made
   before anything is measured, as a user's would be.
3. **Hosts** as ``validate --dp ddp`` has them (network namespaces, rank 0's
   link shaped by ``tc``); ``--rate auto`` picks the rate at which FSDP2's
   collectives of one step (two all-gathers and a reduce-scatter of the
   model, ``3(P−1)/P`` of it across each link) take as long as the compute.
4. **The job** (:mod:`dlsched.jobs.fsdp_run`): the default and the plan in
   alternating blocks, a calibration step per round, the all-gather and
   reduce-scatter timed at a range of sizes, peak memory measured.
5. **The prediction** of both (:func:`dlsched.analyses.fsdp_step.fsdp_step`):
   the profile scaled to the calibration steps' compute, the optimizer's
   measured time per byte, each collective's α and β fitted to its timings
   (``time = a + n·b``, ``a = (P−1)·α``, ``b = (P−1)/(P·β)``), and FSDP2's
   own cost per hook: the one-process FSDP2 step's excess over the plain
   one, over the four hooks of each unit. The one-process step's ranks meet
   where FSDP2's collectives make them meet, so that excess also holds what
   waiting for the slowest rank at each collective costs.

Examples
--------
>>> pick_fsdp_rate(compute=0.5, model_bytes=20e6, workers=2)
'500mbit'
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dlsched import limits
from dlsched.analyses.ddp_step import HostCosts
from dlsched.analyses.fsdp_step import FsdpNetwork, FsdpStepResult, fsdp_step
from dlsched.analyses.fsdp_units import fsdp_units
from dlsched.errors import DlschedError
from dlsched.importers.loader import detect_format, load_model
from dlsched.planning.fsdp_plan import FsdpPlanResult, fsdp_memory, plan_file, plan_fsdp
from dlsched.planning.memory import MARGIN
from dlsched.profiling.network import LinkMeasurement
from dlsched.runtime import netns
from dlsched.runtime.hosts import open_hosts

from .ddp_validate_run import PROFILE_RUNS, allreduce_sizes, fit_line
from .fsdp_run import MODES, FsdpRun, run_fsdp
from .in_situ_oracle import in_situ_oracle

#: the per-message latency the plan assumes before the link is measured (seconds)
GUESS_ALPHA = 5e-4
#: collectives are timed up to the model's bytes, and at least up to this many (a line needs two sizes)
TIMED_UP_TO = 16 * 2**20
#: steps per block of the job (the period is measured over the steps between its second and last)
BLOCK = 4


def pick_fsdp_rate(compute: float, model_bytes: float, workers: int) -> str:
    """The ``tc`` rate at which one step's collectives (``3(P−1)/P`` of the model across each link) take
    ``compute`` seconds; rounded to 100 mbit, at least 100 mbit."""
    per_link = 3 * (workers - 1) / workers * model_bytes
    mbit = per_link * 8 / max(compute, 1e-6) / 1e6
    return f"{max(100, int(round(mbit / 100.0)) * 100)}mbit"


def fit_collective(sizes: Sequence[int], secs: Sequence[float], workers: int, what: str) -> tuple[float, float]:
    """α and β of ``(P−1)·α + (P−1)/P · n/β`` through timed all-gathers or reduce-scatters."""
    a, b = fit_line(sizes, secs, what)
    return a / (workers - 1), (workers - 1) / (workers * b)


@dataclass
class FsdpValidation:
    model: str
    workers: int
    batch: int
    threads: int
    hosts: dict
    plan: FsdpPlanResult
    run: FsdpRun
    network: FsdpNetwork
    compute_s: float
    optimizer_s: float
    predicted: dict  # mode -> FsdpStepResult
    iterations: int
    wall_s: float
    #: FSDP2's own cost per step on the thread, meeting the other ranks included (the one-process step's
    #: excess over the plain one), seconds
    overhead_s: float = 0.0

    def measured(self, mode: str) -> float:
        return float(np.mean(self.run.periods[mode]))


def _check(model, workers, iterations, warmup, max_work):
    if detect_format(model) != "torch":
        raise DlschedError(f"validate --dp fsdp runs torch's fully_shard; {model!r} is not a PyTorch factory "
                           "(path/file.py:fn or package.module:fn)")
    if workers < 2:
        raise DlschedError(f"--dp fsdp needs at least 2 processes to shard over, got {workers}")
    limits.check_work(limits.ranks_work(workers, limits.plural(workers, "worker")), limits.RANKS, "validate",
                      max_work)
    limits.check_work(limits.cluster_work(2 * BLOCK + 1, iterations, warmup), limits.CLUSTER, "validate",
                      max_work)


def run_fsdp_validation(model: str, *, workers: int = 2, rate: str | None = "auto", batch: int = 8,
                        threads: int = 1, network: str = "auto", iterations: int = 20, warmup: int = 3,
                        memory_bytes: float | None = None, units: Sequence[str] | None = None,
                        timeout: float = 900.0, max_work: int | None = None,
                        say: Callable[[str], None] = lambda s: None, memory_margin: float = MARGIN
                        ) -> FsdpValidation:
    """Run FSDP2's default and the plan for ``model`` and predict both (module docstring); the plan keeps
    ``memory_margin`` of ``memory_bytes`` free, as ``plan-fsdp --margin`` does.

    Raises
    ------
    DlschedError
        Bad settings or too much work (before any process starts), a model that is not a PyTorch
        factory, a unit that is not a module, a budget no schedule fits, a failed profile or rank.
    """
    _check(model, workers, iterations, warmup, max_work)
    if rate not in (None, "auto"):
        netns.tc_rate_bytes(rate)
    t0 = time.monotonic()
    graph = load_model(model, mode="training", batch=batch)
    model_bytes = float(sum(s.bytes for s in graph.sends()))
    say(f"profiling the training step with {threads} thread(s) per process")
    oracle = in_situ_oracle(model, graph, LinkMeasurement(1e12, 0.0, "none"), threads, runs=PROFILE_RUNS)
    if rate == "auto" and (network == "localhost" or not netns.available()):
        rate = None
    if rate == "auto":
        rate = pick_fsdp_rate(oracle.compute, model_bytes, workers)
        say(f"picked rate {rate} (one step's all-gathers and reduce-scatters as long as its compute)")
    beta = netns.tc_rate_bytes(rate) if rate else 1e9
    guess = FsdpNetwork(workers, GUESS_ALPHA, beta, GUESS_ALPHA, beta)
    plan = plan_fsdp(graph, oracle.times, guess, memory_bytes, units, margin=memory_margin)
    say(f"plan: {plan.plan.label}; FSDP2's default on its {len(plan.plan.units)} units beside it")
    hosts = open_hosts(network, workers, rate)
    try:
        say(f"hosts: {hosts.note}")
        say(f"running FSDP2's default and the plan in alternating blocks of {BLOCK} steps: {warmup} + "
            f"{iterations} rounds")
        run = run_fsdp(model, workers=workers, batch=batch, threads=threads,
                       plan=plan_file(graph, plan).to_dict(), sizes=allreduce_sizes(max(model_bytes, TIMED_UP_TO)),
                       rounds=iterations, warmup=warmup, block=BLOCK, timeout=timeout, hosts=hosts)
        host_info = {"kind": hosts.kind, "rate": hosts.rate, "note": hosts.note}
    finally:
        hosts.close()
    net, compute, optimizer, overhead, predicted = _predict(graph, oracle, run, plan, model_bytes, workers)
    return FsdpValidation(model, workers, batch, threads, host_info, plan, run, net, compute, optimizer, predicted,
                          iterations, time.monotonic() - t0, overhead)


def _predict(graph, oracle, run: FsdpRun, plan: FsdpPlanResult, model_bytes: float,
             workers: int) -> tuple[FsdpNetwork, float, float, float, dict[str, FsdpStepResult]]:
    """Both schedules simulated with what the job measured (module docstring, step 5)."""
    c = run.calibration
    compute, optimizer = float(np.median(c[:, 0])), float(np.median(c[:, 1]))
    overhead = max(0.0, float(np.median(c[:, 2] + c[:, 3] - c[:, 0] - c[:, 1])))
    scale = compute / oracle.compute
    times = dict(oracle.times)
    for op in graph.compute_ops():
        times[op.name] *= scale
    ag = fit_collective(run.sizes, run.all_gather_s, workers, "all-gathers")
    rs = fit_collective(run.sizes, run.reduce_scatter_s, workers, "reduce-scatters")
    net = FsdpNetwork(workers, ag[0], ag[1], rs[0], rs[1])
    units = fsdp_units(graph, plan.plan.units, workers)
    host = HostCosts(optimizer_s_per_byte=optimizer / model_bytes, per_hook_s=overhead / (4 * len(units)))
    memory = fsdp_memory(graph)
    predicted = {m: fsdp_step(graph, times, units, c.schedule, net, host, memory)
                 for m, c in zip(MODES, (plan.default, plan.plan))}
    return net, compute, optimizer, overhead, predicted
