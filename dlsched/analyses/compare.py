"""Transfer orders side by side: each one's simulated makespan and efficiency E (DESIGN §4.5–4.6).

A random order is one draw among many, so ``random`` stands for the mean over
:data:`RANDOM_SEEDS` seeds, ``seed`` to ``seed + RANDOM_SEEDS − 1``
(:func:`random_seeds`); every other order is simulated once, at ``seed``. The
CI gate compares at seed 0: its random figures are the mean over seeds 0–4.

Long work reports through ``reporter``, a factory such as
:func:`dlsched.cli.common.progress`: ``reporter(description, total=None,
unit="")`` returns a context manager that yields a ``report(done, total=None)``
callback. Each stage gets its own: an exact search (in search nodes), then
all the simulations together (in op-steps).

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(30, 6, training=True, seed=2)
>>> rows = compare_orders(g, t, ["tac", "random"])
>>> rows.columns.tolist()
['algorithm', 'makespan', 'efficiency', 'straggler_share']
>>> list(random_seeds(3))
[3, 4, 5, 6, 7]
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from dlsched import limits
from dlsched.dag import Graph
from dlsched.errors import DlschedError

from .links import DEFAULT_SHARING
from .orders import ORDERS, UNORDERED, compute_order

#: Seeds a random order is averaged over.
RANDOM_SEEDS = 5
COLUMNS = ["algorithm", "makespan", "efficiency", "straggler_share"]


def random_seeds(seed: int = 0) -> range:
    """The seeds the ``random`` order is averaged over: ``seed`` to ``seed + RANDOM_SEEDS − 1``."""
    return range(seed, seed + RANDOM_SEEDS)


def _seeds(name: str, seed: int):
    return random_seeds(seed) if name == "random" else (seed,)


def simulation_count(orders: Sequence[str]) -> int:
    """Simulations :func:`compare_orders` runs for ``orders`` (a random order runs once per seed).

    Examples
    --------
    >>> simulation_count(["tac", "random"])
    6
    """
    return sum(len(_seeds(name, 0)) for name in orders)


def check_simulate_work(ops: int | None, workers: int, iterations: int, compare: Sequence[str] = (),
                        max_work: int | None = None) -> None:
    """Refuse a simulation (one run, plus those ``compare`` needs) above :data:`dlsched.limits.SIMULATE`.

    One simulation is work of ``ops × workers × iterations`` op-steps;
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


def parse_orders(text: str | None) -> list[str]:
    """``"tic, tac"`` → ``["tic", "tac"]``: the comma-separated orders to compare.

    Raises
    ------
    DlschedError
        A name that is not one of :data:`dlsched.analyses.orders.ORDERS`.

    Examples
    --------
    >>> parse_orders("tic, tac,,random"), parse_orders(None)
    (['tic', 'tac', 'random'], [])
    """
    if not text:
        return []
    names = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in names if a not in ORDERS]
    if bad:
        raise DlschedError(f"unknown order(s) {', '.join(bad)}; choose from {', '.join(ORDERS)}")
    return names


def _stage(reporter, description: str, total: float | None = None, unit: str = ""):
    return reporter(description, total=total, unit=unit) if reporter else contextlib.nullcontext()


def order_priorities(graph: Graph, name: str, times: Mapping[str, float] | None = None, seed: int = 0,
                     time_limit: float | None = None, max_work: int | None = None, reporter=None) -> dict | None:
    """The priorities of the order ``name`` (``None`` for ``unordered``); the exact search reports as it goes.

    See :func:`dlsched.analyses.orders.compute_order`; ``time_limit`` and
    ``max_work`` bound the exact search, ``reporter`` opens its progress stage.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, _ = random_dag(10, 3, seed=1)
    >>> order_priorities(g, "unordered") is None, len(order_priorities(g, "topo"))
    (True, 3)
    """
    if name == UNORDERED:
        return None
    if name != "exact":
        return compute_order(graph, name, times=times, seed=seed)
    return dict(exact_search(graph, times, time_limit, max_work, reporter).priorities)


def exact_search(graph: Graph, times: Mapping[str, float] | None, time_limit: float | None = None,
                 max_work: int | None = None, reporter=None):
    """The exact search with its own progress stage; the whole :class:`~dlsched.analyses.exact.ExactResult`,
    so that a caller can say whether the optimum was proven within ``time_limit``."""
    from .exact import exact_order

    if times is None:
        compute_order(graph, "exact")  # the one message for an order that needs times
    limit = f" (at most {time_limit:g} s)" if time_limit is not None else ""
    with _stage(reporter, f"searching the exact order of {graph.name}{limit}", unit="search nodes") as bar:
        return exact_order(graph, times, time_limit=time_limit, max_work=max_work, progress=bar)


@dataclass(frozen=True)
class Run:
    """One simulation to do: an order's name, the seed, its priorities (``None``: unordered)."""

    algorithm: str
    seed: int
    priorities: Mapping[str, int] | None
    keep_timeline: bool = False


@dataclass(frozen=True)
class RunResult:
    """One order's simulated iterations, in the same shape for one worker and for several.

    Attributes
    ----------
    makespan : float
        The mean iteration time (one worker and iteration: the makespan).
    first_makespan : float
        The first iteration's time.
    straggler_share : float
        Its mean over iterations (0 for one worker).
    summary : dict
        Several workers or iterations only: ``iteration_time``,
        ``straggler_share``, ``iteration_efficiency`` (``E_W``) and
        ``worker_efficiency`` (each worker's own E) (mean, p50, p95, min, max).
    per_worker, per_iteration : list of dict
        Several workers or iterations only: each worker's means, each iteration's figures.
    timeline : pandas.DataFrame or None
        The first iteration's ops, when the run kept them.
    efficiency, first_efficiency : float
        E of the run (the mean of its iterations' ``E_W``; one worker and
        iteration: TicTac's E of the makespan) and of its first iteration, in [0, 1].
    """

    makespan: float
    first_makespan: float
    straggler_share: float = 0.0
    summary: dict = field(default_factory=dict)
    per_worker: list = field(default_factory=list)
    per_iteration: list = field(default_factory=list)
    timeline: object = None
    efficiency: float = 1.0
    first_efficiency: float = 1.0

    @property
    def multi(self) -> bool:
        """Whether several workers or iterations (or jitter) were simulated."""
        return bool(self.summary)


def run_order(graph: Graph, times: Mapping[str, float], priorities: Mapping[str, int] | None = None, seed: int = 0,
              workers: int = 1, iterations: int = 1, jitter: float = 0.0, sharing: str = DEFAULT_SHARING,
              keep_timeline: bool = False, progress: Callable | None = None) -> RunResult:
    """Simulate one order: one iteration on one worker, or else the synchronous multi-worker model.

    Parameters are those of :func:`dlsched.analyses.multiworker.simulate_workers`;
    ``progress(done, total=None)`` counts op-steps.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(20, 5, training=True, seed=3)
    >>> one, two = run_order(g, t), run_order(g, t, workers=2, iterations=2)
    >>> one.multi, two.multi, len(two.per_iteration)
    (False, True, 2)
    """
    if not (workers > 1 or iterations > 1 or jitter > 0):
        from .bounds import bounds
        from .multiworker_bounds import rate
        from .simulate import simulate

        s = simulate(graph, times, priorities, seed=seed)
        if progress is not None:
            progress(len(graph))
        b = bounds(graph, times)
        e = _nan_if_none(rate(s.makespan, b.upper, b.lower).efficiency)
        return RunResult(s.makespan, s.makespan, timeline=s.frame() if keep_timeline else None, efficiency=e,
                         first_efficiency=e)
    from .multiworker import simulate_workers

    r = simulate_workers(graph, times, workers=workers, priorities=priorities, iterations=iterations, seed=seed,
                         jitter=jitter, sharing=sharing, keep_timeline=keep_timeline, progress=progress)
    summary = r.summary()
    pw = r.per_worker.groupby("worker").agg(makespan=("makespan", "mean"), efficiency=("efficiency", "mean"),
                                            model_error=("model_error", "mean"), wait=("wait", "mean")).reset_index()
    per_iter = []
    for it, grp in r.per_worker.groupby("iteration"):
        row = r.per_iteration.iloc[int(it)]
        per_iter.append({"iteration": int(it), "iteration_time": float(row["iteration_time"]),
                         "straggler_share": float(row["straggler_share"]), "efficiency": float(row["efficiency"]),
                         "makespans": [float(x) for x in grp.sort_values("worker")["makespan"]],
                         "efficiencies": [None if x != x else float(x)
                                          for x in grp.sort_values("worker")["efficiency"]]})
    records = pw.to_dict(orient="records")
    for rec in records:  # a worker whose every iteration was a model error has no efficiency
        rec["efficiency"] = None if rec["efficiency"] != rec["efficiency"] else rec["efficiency"]
    return RunResult(
        makespan=summary["iteration_time"]["mean"],
        first_makespan=float(r.per_iteration["iteration_time"].iloc[0]),
        straggler_share=summary["straggler_share"]["mean"],
        summary={k: summary[k] for k in ("iteration_time", "straggler_share", "worker_efficiency")}
        | {"iteration_efficiency": summary["efficiency"]},
        per_worker=records,
        per_iteration=per_iter,
        timeline=r.timeline,
        efficiency=_nan_if_none(summary["efficiency"]["mean"]),
        first_efficiency=float(r.per_iteration["efficiency"].iloc[0]),
    )


def _nan_if_none(e: float | None) -> float:
    return float("nan") if e is None else float(e)


def plan_runs(graph: Graph, times: Mapping[str, float] | None, orders: Sequence[str], seed: int = 0,
              given: Mapping[str, Mapping[str, int]] | None = None, time_limit: float | None = None,
              max_work: int | None = None, reporter=None) -> list[Run]:
    """Every simulation ``orders`` need, with its order computed (see :func:`compare_orders`)."""
    given = given or {}
    return [Run(name, s, given[name] if name in given else
                order_priorities(graph, name, times, s, time_limit, max_work, reporter))
            for name in orders for s in ((seed,) if name in given else _seeds(name, seed))]


def simulate_runs(graph: Graph, times: Mapping[str, float], runs: Sequence[Run], workers: int = 1,
                  iterations: int = 1, jitter: float = 0.0, sharing: str = DEFAULT_SHARING,
                  reporter=None) -> list[RunResult]:
    """Simulate ``runs`` one after another, all under one progress stage (see :func:`run_order`)."""
    per_run = len(graph) * workers * iterations
    with _stage(reporter, f"simulating {graph.name}", total=per_run * len(runs), unit="op-steps") as bar:
        return [run_order(graph, times, r.priorities, r.seed, workers, iterations, jitter, sharing, r.keep_timeline,
                          _offset(bar, per_run * i)) for i, r in enumerate(runs)]


def _offset(bar, offset: float):
    """The callback for a run whose own ``done`` counts from ``offset`` on ``bar``."""
    return None if bar is None else (lambda done, total=None: bar(offset + done))


def order_rows(orders: Sequence[str], runs: Sequence[Run], results: Sequence[RunResult]):
    """One row per order: the means over its runs of the makespan, the efficiency E and the straggler share."""
    import pandas as pd

    rows = []
    for name in orders:
        mine = [res for run, res in zip(runs, results) if run.algorithm == name]
        rows.append({"algorithm": name, "makespan": statistics.fmean(r.makespan for r in mine),
                     "efficiency": statistics.fmean(r.efficiency for r in mine),
                     "straggler_share": statistics.fmean(r.straggler_share for r in mine)})
    return pd.DataFrame(rows, columns=COLUMNS)


def compare_orders(graph: Graph, times: Mapping[str, float], orders: Sequence[str], seed: int = 0,
                   workers: int = 1, iterations: int = 1, jitter: float = 0.0, sharing: str = DEFAULT_SHARING,
                   given: Mapping[str, Mapping[str, int]] | None = None, time_limit: float | None = None,
                   max_work: int | None = None, reporter=None):
    """Simulate each order and put them side by side; ``random`` is the mean over :func:`random_seeds`.

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → seconds for every op.
    orders : sequence of str
        Names from :data:`dlsched.analyses.orders.ORDERS`, one row each, in this order.
    seed : int
        Seed of every run; ``random`` runs at each of ``random_seeds(seed)``.
    workers, iterations, jitter, sharing
        The simulation (see :func:`dlsched.analyses.multiworker.simulate_workers`);
        by default one iteration on one worker.
    given : mapping, optional
        Orders already computed, by name: each is simulated once, at ``seed``.
    time_limit, max_work : optional
        Bounds of the exact search.
    reporter : callable, optional
        Opens a progress stage (see the module docstring).

    Returns
    -------
    pandas.DataFrame
        Columns ``algorithm, makespan, efficiency, straggler_share``; E is
        against the bounds of all the workers (DESIGN §4.6), in [0, 1].

    Raises
    ------
    DlschedError
        An unknown order, an order that needs times, an exact search too large.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(20, 5, training=True, seed=3)
    >>> rows = compare_orders(g, t, ["tic", "unordered"], workers=2, iterations=3, seed=1)
    >>> rows.algorithm.tolist(), bool((rows.straggler_share >= 0).all())
    (['tic', 'unordered'], True)
    """
    runs = plan_runs(graph, times, orders, seed, given, time_limit, max_work, reporter)
    results = simulate_runs(graph, times, runs, workers, iterations, jitter, sharing, reporter)
    return order_rows(orders, runs, results)
