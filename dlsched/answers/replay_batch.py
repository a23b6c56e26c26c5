"""The ``replay-batch`` answer: a speed trace replayed against online batch-size policies (DESIGN §5.1, LB-BSP).

The trace is a built-in scenario or a measured file
(:mod:`dlsched.planning.online_batch_sim`); the policies run over it with
:func:`~dlsched.planning.online_batch_sim.simulate_policies`, and a plot of
batches and times is written on request (:mod:`dlsched.formats.batch_plot`).

Examples
--------
>>> res = replay_batch(SpeedSource(scenario="fig8", iterations=120), ["lbbsp-gpu"])
>>> res.summary().final_batches[0]
[89, 21, 12, 6]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dlsched import limits
from dlsched.atomic import check_writable
from dlsched.errors import DlschedError
from dlsched.planning.online_batch_sim import (DEFAULT_POLICIES, OnlineSimResult, read_trace, scenario_trace,
                                               simulate_policies)


@dataclass(frozen=True)
class SpeedSource:
    """The speed trace: a built-in ``scenario`` (:data:`~dlsched.planning.online_batch_sim.SCENARIOS`) or a
    measured ``trace`` file, not both; a scenario's ``workers``, ``iterations`` and lognormal ``noise`` (checked
    against a file); ``seed`` seeds the scenario and the policies."""

    scenario: str | None = None
    trace: str | None = None
    workers: int | None = None
    iterations: int | None = None
    noise: float = 0.0
    seed: int = 0


def replay_batch(source: SpeedSource, policies: Sequence[str] = DEFAULT_POLICIES, global_batch: int | None = None,
                 caps: Sequence[int] | None = None, plot: str | None = None,
                 max_work: int | None = None) -> OnlineSimResult:
    """Build the trace of ``source`` and run the ``policies`` over it; with ``plot``, write a PNG there.

    Defaults: the ``step`` scenario; 4 workers (32 for ``table3``); 300 iterations (400 for ``fig8``, 2,000 for
    ``table3``); a global batch of 128 for ``fig8``, else 32 per worker. ``caps`` are the workers' largest batches.

    Raises
    ------
    DlschedError
        Both or a bad trace, ``workers`` that disagree with the trace file, a bad policy or global batch,
        more worker-steps than ``max_work`` (default :data:`dlsched.limits.REPLAY`), before the trace is built.
    """
    scenario, trace_path, workers, iterations, seed = (source.scenario, source.trace, source.workers,
                                                       source.iterations, source.seed)
    if trace_path is not None and scenario is not None:
        raise DlschedError("give either a built-in scenario or a trace file, not both")
    if trace_path is not None:
        trace = read_trace(trace_path)
        if workers is not None and workers != trace.workers:
            raise DlschedError(f"the trace {trace_path} has {trace.workers} workers, not the {workers} asked for")
        if iterations is not None and iterations != trace.iterations:
            raise DlschedError(f"the trace {trace_path} has {trace.iterations} iterations, not {iterations}")
    else:
        scenario = scenario or "step"
        n = workers or (32 if scenario == "table3" else 4)
        k = iterations or {"fig8": 400, "table3": 2000}.get(scenario, 300)
        limits.check_work(limits.replay_work(n, k, len(policies)), limits.REPLAY, "replay-batch", max_work)
        trace = scenario_trace(scenario, n, k, seed=seed, noise=source.noise)
    if trace_path is not None:
        limits.check_work(limits.replay_work(trace.workers, trace.iterations, len(policies)), limits.REPLAY,
                          "replay-batch", max_work)
    check_writable(plot)
    if global_batch is None:
        global_batch = 128 if trace.name == "fig8" else 32 * trace.workers
    result = simulate_policies(trace, list(policies), global_batch, caps=caps, seed=seed)
    if plot is not None:
        from dlsched.formats.batch_plot import plot_batches

        plot_batches(result.steps, plot, iterations=result.iterations,
                     title=f"{result.trace.name}: X = {result.global_batch}, {result.trace.workers} workers")
    return result
