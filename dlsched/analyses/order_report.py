"""The ``order`` answer: a priority file, rated by simulation against an unordered baseline.

Given a time oracle, the order and the unordered baseline (every transfer
picked at random among the ready ones) are each simulated once at the same
seed (:func:`dlsched.analyses.compare.compare_orders`), beside the bounds.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(30, 6, training=True, seed=2)
>>> r = order_report(g, "tac", t)
>>> d = r.to_dict("tac.json", "json")
>>> d["transfers"], d["makespan"] <= d["unordered_makespan"] + 1e-12, d["lower"] <= d["makespan"] <= d["upper"]
(6, True, True)
>>> order_report(g, "tic").to_dict("tic.json", "json")["makespan"] is None
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from dlsched.dag import Graph

from .orders import UNORDERED


@dataclass(frozen=True)
class OrderReport:
    """What :func:`order_report` answers.

    Attributes
    ----------
    model, mode : str
        The graph's name and mode.
    priority_file : dlsched.formats.priority_file.PriorityFile
        The order, ready to write (it records the oracle's hash when there was one).
    compared : pandas.DataFrame or None
        With times: the order's row, then the unordered baseline's (see
        :func:`~dlsched.analyses.compare.compare_orders`).
    upper, lower : float or None
        With times: the bounds U and L.
    search : ExactResult or None
        ``exact`` only: whether the optimum was proven, the proven lower bound, the nodes and seconds spent.
    """

    model: str
    mode: str
    priority_file: object
    compared: object = None
    upper: float | None = None
    lower: float | None = None
    search: object = None

    def to_dict(self, output, fmt: str) -> dict:
        """The JSON form, naming the file the order was written to and its format."""
        pf = self.priority_file
        out = {"model": self.model, "mode": self.mode, "algorithm": pf.algorithm, "transfers": len(pf.transfers),
               "distinct_priorities": len({t.priority for t in pf.transfers}), "output": str(output), "format": fmt,
               "oracle": pf.oracle, "makespan": None, "efficiency": None}
        if self.compared is not None:
            ordered, baseline = self.compared.itertuples(index=False)
            out.update(makespan=float(ordered.makespan), efficiency=float(ordered.efficiency),
                       unordered_makespan=float(baseline.makespan), unordered_efficiency=float(baseline.efficiency),
                       upper=self.upper, lower=self.lower)
        if self.search is not None:
            r = self.search
            out["exact"] = {"proven": r.proven, "makespan": r.makespan, "lower_bound": r.lower_bound,
                            "explored": r.explored, "seconds": r.elapsed}
        return out


def order_report(graph: Graph, algo: str, times: Mapping[str, float] | None = None, seed: int = 0,
                 time_limit: float | None = None, max_work: int | None = None, reporter=None) -> OrderReport:
    """Compute ``algo``'s order of ``graph``'s transfers and, given ``times``, rate it.

    Parameters
    ----------
    graph : Graph
    algo : str
        One of :data:`dlsched.analyses.orders.ALGORITHMS`.
    times : mapping, optional
        The time oracle; needed by ``tac`` and ``exact``, and for the makespans.
    seed : int
        Seed of ``random`` and of the unordered baseline.
    time_limit, max_work : optional
        Bounds of the exact search.
    reporter : callable, optional
        Opens a progress stage (see :mod:`dlsched.analyses.compare`).

    Returns
    -------
    OrderReport

    Raises
    ------
    DlschedError
        ``tac``/``exact`` without times, an exact search too large.
    """
    from dlsched.formats.oracle_file import oracle_hash
    from dlsched.formats.priority_file import make_priority_file

    from .bounds import bounds
    from .compare import compare_orders, exact_search, order_priorities

    search = exact_search(graph, times, time_limit, max_work, reporter) if algo == "exact" else None
    priorities = dict(search.priorities) if search is not None else order_priorities(graph, algo, times, seed)
    pf = make_priority_file(graph, priorities, algo, oracle_hash(times) if times is not None else None)
    if times is None:
        return OrderReport(graph.name, graph.mode, pf)
    b = bounds(graph, times)
    compared = compare_orders(graph, times, [algo, UNORDERED], seed, given={algo: priorities})
    return OrderReport(graph.name, graph.mode, pf, compared, b.upper, b.lower, search)
