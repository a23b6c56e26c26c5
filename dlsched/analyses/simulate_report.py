"""The ``simulate`` answer: one order's simulated iterations against the bounds, and the orders compared.

The order comes from a priority file or is computed by name
(:func:`dlsched.analyses.compare.order_priorities`); the orders to compare
are simulated the same way, ``random`` as the mean over its seeds
(:func:`dlsched.analyses.compare.compare_orders`). One simulation is work of
``ops × workers × iterations`` op-steps; :func:`check_simulate_work` refuses
too much before it starts.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(30, 6, training=True, seed=2)
>>> r = simulate_report(g, t, "tac", compare=["random"], workers=2)
>>> r.figures["algorithm"], r.multi, [row["algorithm"] for row in r.figures["compare"]]
('tac', True, ['random'])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from dlsched import limits
from dlsched.dag import Graph

from .compare import Run, RunResult, order_priorities, order_rows, plan_runs, simulate_runs, simulation_count
from .links import DEFAULT_SHARING


def check_simulate_work(ops: int | None, workers: int, iterations: int, compare: Sequence[str] = (),
                        max_work: int | None = None) -> None:
    """Refuse a simulation (one run, plus those ``compare`` needs) above :data:`dlsched.limits.SIMULATE`.

    ``ops=None`` checks the options alone, before the model is loaded.

    Raises
    ------
    WorkLimitError
        The op-steps exceed the budget (``max_work`` overrides it).

    Examples
    --------
    >>> check_simulate_work(None, 1_000, 10**5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dlsched.errors.WorkLimitError: simulate would take at least 900,000,000 simulated op-steps ...
    """
    work = limits.simulate_work(ops, workers, iterations, 1 + simulation_count(compare))
    limits.check_work(work, limits.SIMULATE, "simulate", max_work)


@dataclass(frozen=True)
class SimulationReport:
    """What :func:`simulate_report` answers.

    Attributes
    ----------
    figures : dict
        The JSON object: model, order, makespan, efficiency, bounds, sizes; with
        several workers or iterations their statistics, ``sharing`` and
        ``jitter``; with orders compared, ``compare`` (one row each). With
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



def simulate_report(graph: Graph, times: Mapping[str, float], algo: str = "unordered", given=None,
                    compare: Sequence[str] = (), workers: int = 1, iterations: int = 1, seed: int = 0,
                    jitter: float = 0.0, sharing: str = DEFAULT_SHARING, time_limit: float | None = None,
                    max_work: int | None = None, keep_timeline: bool = False, reporter=None) -> SimulationReport:
    """Simulate ``graph`` under one order, beside the bounds and the ``compare`` orders.

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → seconds for every op.
    algo : str
        The order by name (:data:`dlsched.analyses.orders.ORDERS`), unless ``given``.
    given : PriorityFile, optional
        A priority file's order (labelled ``"<algorithm> (file)"``).
    compare : sequence of str
        Orders to simulate alongside (see :func:`~dlsched.analyses.compare.compare_orders`).
    workers, iterations, seed, jitter, sharing
        The simulation (see :func:`~dlsched.analyses.multiworker.simulate_workers`).
    time_limit, max_work : optional
        The exact search's bounds; ``max_work`` also raises the simulation budget.
    keep_timeline : bool
        Keep the first iteration's per-op timeline (for a trace or a Gantt chart).
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
        An order that needs times or an exact search too large.
    """
    from .bounds import bounds
    from .dependency_bound import dependency_bound
    from .multiworker_bounds import multiworker_bounds, rate

    check_simulate_work(len(graph), workers, iterations, compare, max_work)
    if given is not None:
        label, priorities = f"{given.algorithm} (file)", given.priorities
    else:
        label, priorities = algo, order_priorities(graph, algo, times, seed, time_limit, max_work, reporter)
    # Every order first (the exact search has its own stage), then every simulation under one.
    compared = plan_runs(graph, times, compare, seed, time_limit=time_limit, max_work=max_work, reporter=reporter)
    b, dep = bounds(graph, times), dependency_bound(graph, times)
    bw = multiworker_bounds(graph, times, workers)
    upper, lower = float(bw.upper), float(bw.lower)
    # One worker cannot beat its dependency bound; sharing the links only slows it.
    dep_lower = max(float(dep.lower), lower)
    results = simulate_runs(graph, times, [Run(label, seed, priorities, keep_timeline), *compared], workers,
                            iterations, jitter, sharing, reporter)
    run = results[0]
    figures = {
        "model": graph.name,
        "mode": graph.mode,
        "algorithm": label,
        "makespan": run.makespan,
        "efficiency": run.efficiency,
        "upper": upper,
        "lower": lower,
        "dependency_lower": dep_lower,
        "dependency_efficiency": _clipped(rate(run.makespan, upper, dep_lower), upper, dep_lower),
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
    if run.multi:
        figures.update(run.summary)
        figures["sharing"] = sharing
        figures["jitter"] = jitter
    if compare:
        figures["compare"] = order_rows(compare, compared, results[1:]).to_dict(orient="records")
    return SimulationReport(figures, run, run.first_efficiency)


def _clipped(rating, upper: float, lower: float) -> float:
    """E of a rating, or the bound it lies beyond (0 above ``U``, 1 below ``L``): a mean over jittered
    iterations can stray outside the oracle's bounds although every iteration lies within its own."""
    if rating.efficiency is not None:
        return rating.efficiency
    return 0.0 if rating.model_error > 0 else 1.0
