"""The ``simulate`` answer: one order's simulated iterations against the bounds, and the orders compared.

The order comes from a priority file or is computed by name
(:func:`dlsched.analyses.compare.order_priorities`); the orders to compare
are simulated the same way, ``random`` as the mean over its seeds
(:func:`dlsched.analyses.compare.compare_orders`). One simulation is work of
``ops × workers × iterations`` op-steps;
:func:`~dlsched.analyses.compare.check_simulate_work` refuses too much before
it starts. The collectives of ``simulate --collective`` are another answer,
:mod:`dlsched.answers.collectives`.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(30, 6, training=True, seed=2)
>>> r = simulate(ModelSpec.of(g), OracleSpec.of(t), OrderChoice("tac"), Run(workers=2, compare=["random"]))
>>> r.figures["algorithm"], r.multi, [row["algorithm"] for row in r.figures["compare"]]
('tac', True, ['random'])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dlsched.analyses.compare import RunResult
from dlsched.analyses.links import DEFAULT_SHARING

from .options import ModelSpec, OracleSpec, OrderChoice, load_timed_model


@dataclass(frozen=True)
class Run:
    """How the iterations run (:func:`~dlsched.analyses.multiworker.simulate_workers`).

    Attributes
    ----------
    workers, iterations : int
        Workers sharing the servers' links, and iterations each.
    jitter : float
        Lognormal sigma of per-op multiplicative noise, per worker and iteration.
    sharing : str
        How a link is shared (:data:`dlsched.analyses.links.LINK_POLICIES`).
    compare : sequence of str
        Orders to simulate alongside (see :func:`~dlsched.analyses.compare.compare_orders`).
    """

    workers: int = 1
    iterations: int = 1
    jitter: float = 0.0
    sharing: str = DEFAULT_SHARING
    compare: Sequence[str] = ()


@dataclass(frozen=True)
class Outputs:
    """Files written beside the answer: a Chrome trace of every iteration, a Gantt chart of the first (its
    colours ``priority`` or ``kind``); ``timeline`` keeps the first iteration's per-op timeline in the report
    without writing either."""

    trace: str | None = None
    plot: str | None = None
    color_by: str = "priority"
    timeline: bool = False


@dataclass(frozen=True)
class SimulationReport:
    """What :func:`simulate` answers.

    Attributes
    ----------
    figures : dict
        The JSON object: model, order, makespan, efficiency, bounds, sizes; with
        several workers or iterations their statistics, ``sharing`` and
        ``jitter``; with orders compared, ``compare`` (one row each); the
        files written (``trace``, ``trace_iterations``, ``plot``). With
        ``W`` workers ``upper``/``lower`` are ``U_W``/``L_W`` (DESIGN §4.6;
        one worker's as ``worker_upper``/``worker_lower``) and ``efficiency``
        the mean of the iterations' ``E_W``, always in [0, 1].
    run : RunResult
        The order's simulation (per-worker detail, the first iteration's timeline).
    first_efficiency : float
        E of the first iteration (the one a timeline shows).
    """

    figures: dict
    run: RunResult
    first_efficiency: float

    @property
    def multi(self) -> bool:
        """Several workers or iterations (or jitter) were simulated."""
        return self.run.multi

    @property
    def detail(self) -> dict:
        """``per_worker`` and ``per_iteration``, for the JSON form (empty for one worker and iteration)."""
        return {"per_worker": self.run.per_worker, "per_iteration": self.run.per_iteration} if self.multi else {}


def simulate(model: ModelSpec, oracle: OracleSpec, order: OrderChoice, run: Run = Run(),
             outputs: Outputs = Outputs(), max_work: int | None = None, reporter=None) -> SimulationReport:
    """Simulate ``model`` under one order, beside the bounds and the ``run.compare`` orders.

    Parameters
    ----------
    model, oracle : ModelSpec, OracleSpec
        Both needed: every op's time.
    order : OrderChoice
        The order by name (:data:`dlsched.analyses.orders.ORDERS`), or a
        priority file's (labelled ``"<algorithm> (file)"``); ``seed`` also
        seeds the jitter, ``time_limit`` bounds an exact search.
    run : Run
        Workers, iterations, jitter, link sharing, and the orders to compare.
    outputs : Outputs
        A Chrome trace and a Gantt chart to write (atomically).
    max_work : int, optional
        The exact search's bound; also raises the simulation budget.
    reporter : callable, optional
        Opens a progress stage (see :mod:`dlsched.analyses.compare`).

    Returns
    -------
    SimulationReport

    Raises
    ------
    WorkLimitError
        The simulations would exceed the budget.
    DlschedError
        An order that needs times, an exact search too large, a priority file for another model.
    """
    from dlsched.analyses.bounds import bounds
    from dlsched.analyses.compare import Run as Simulation
    from dlsched.analyses.compare import (check_simulate_work, order_priorities, order_rows, plan_runs,
                                          simulate_runs)
    from dlsched.analyses.dependency_bound import dependency_bound
    from dlsched.analyses.multiworker_bounds import multiworker_bounds, rate
    from dlsched.formats.priority_file import read_priority_file

    graph, times = load_timed_model(model, oracle)
    given = read_priority_file(order.priorities, graph) if order.priorities else None
    workers, iterations, seed, compare = run.workers, run.iterations, order.seed, run.compare
    check_simulate_work(len(graph), workers, iterations, compare, max_work)
    if given is not None:
        label, priorities = f"{given.algorithm} (file)", given.priorities
    else:
        label, priorities = order.algo, order_priorities(graph, order.algo, times, seed, order.time_limit,
                                                         max_work, reporter)
    # Every order first (the exact search has its own stage), then every simulation under one.
    compared = plan_runs(graph, times, compare, seed, time_limit=order.time_limit, max_work=max_work,
                         reporter=reporter)
    b, dep = bounds(graph, times), dependency_bound(graph, times)
    bw = multiworker_bounds(graph, times, workers)
    upper, lower = float(bw.upper), float(bw.lower)
    # One worker cannot beat its dependency bound; sharing the links only slows it.
    dep_lower = max(float(dep.lower), lower)
    keep_timeline = bool(outputs.trace or outputs.plot or outputs.timeline)
    results = simulate_runs(graph, times, [Simulation(label, seed, priorities, keep_timeline), *compared], workers,
                            iterations, run.jitter, run.sharing, reporter)
    result = results[0]
    figures = {
        "model": graph.name,
        "mode": graph.mode,
        "algorithm": label,
        "makespan": result.makespan,
        "efficiency": result.efficiency,
        "upper": upper,
        "lower": lower,
        "dependency_lower": dep_lower,
        "dependency_efficiency": _clipped(rate(result.makespan, upper, dep_lower), upper, dep_lower),
        "speedup": float(b.speedup),
        "ops": len(graph),
        "transfers": len(graph.recvs()),
        "parameter_servers": graph.ps_count,
        "workers": workers,
        "iterations": iterations,
        "seed": seed,
    }
    if workers > 1:
        figures["worker_upper"], figures["worker_lower"] = float(b.upper), float(b.lower)
    if result.multi:
        figures.update(result.summary)
        figures["sharing"] = run.sharing
        figures["jitter"] = run.jitter
    if compare:
        figures["compare"] = order_rows(compare, compared, results[1:]).to_dict(orient="records")
    report = SimulationReport(figures, result, result.first_efficiency)
    _write(report, graph.name, outputs)
    return report


def _write(report: SimulationReport, model: str, outputs: Outputs) -> None:
    """Write the trace and the chart (each reports an unwritable path itself, OutputError), naming them in figures."""
    out, timeline = report.figures, report.run.timeline
    if outputs.trace:
        from dlsched.formats.chrome_trace import write_chrome_trace

        write_chrome_trace(timeline, outputs.trace, model=model,
                           metadata={"algorithm": out["algorithm"], "makespan_s": out["makespan"],
                                     "efficiency": out["efficiency"], "workers": out["workers"]})
        out["trace"] = outputs.trace
        if "iteration" in timeline.columns:
            out["trace_iterations"] = int(timeline["iteration"].nunique())
    if outputs.plot:
        from dlsched.formats.gantt import plot_gantt

        first = timeline[timeline["iteration"] == timeline["iteration"].min()] if "iteration" in timeline.columns \
            else timeline
        plot_gantt(first, outputs.plot, model=model, order=out["algorithm"], makespan=report.run.first_makespan,
                   efficiency=report.first_efficiency, color_by=outputs.color_by)
        out["plot"] = outputs.plot


def _clipped(rating, upper: float, lower: float) -> float:
    """E of a rating, or the bound it lies beyond (0 above ``U``, 1 below ``L``): a mean over jittered
    iterations can stray outside the oracle's bounds although every iteration lies within its own."""
    if rating.efficiency is not None:
        return rating.efficiency
    return 0.0 if rating.model_error > 0 else 1.0
