"""The ``order`` answer: a priority file, rated by simulation against an unordered baseline.

Given a time oracle, the order and the unordered baseline (every transfer
picked at random among the ready ones) are each simulated once at the same
seed (:func:`dlsched.analyses.compare.compare_orders`), beside the bounds.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(30, 6, training=True, seed=2)
>>> r = order(ModelSpec.of(g), OracleSpec.of(t), OrderChoice("tac"))
>>> d = r.to_dict("tac.json", "json")
>>> d["transfers"], d["makespan"] <= d["unordered_makespan"] + 1e-12, d["lower"] <= d["makespan"] <= d["upper"]
(6, True, True)
>>> order(ModelSpec.of(g), OracleSpec(None), OrderChoice("tic")).to_dict("tic.json", "json")["makespan"] is None
True
"""
from __future__ import annotations

from dataclasses import dataclass

from .options import ModelSpec, OracleSpec, OrderChoice, load_timed_model


@dataclass(frozen=True)
class OrderReport:
    """What :func:`order` answers.

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


def order(model: ModelSpec, oracle: OracleSpec, choice: OrderChoice, output: str | None = None, fmt: str = "json",
          max_work: int | None = None, reporter=None) -> OrderReport:
    """Compute ``choice.algo``'s order of ``model``'s transfers, rate it given ``oracle``, and write it to ``output``.

    Parameters
    ----------
    model : ModelSpec
    oracle : OracleSpec
        Needed by ``tac`` and ``exact``, and for the makespans; may be not given otherwise.
    choice : OrderChoice
        ``algo`` (one of :data:`dlsched.analyses.orders.ALGORITHMS`), the ``seed`` of
        ``random`` and of the unordered baseline, and ``time_limit`` of the exact search.
    output, fmt : optional
        The priority file to write (atomically) and its format, ``json`` or ``tictac``.
    max_work : int, optional
        Bound of the exact search.
    reporter : callable, optional
        Opens a progress stage (see :mod:`dlsched.analyses.compare`).

    Returns
    -------
    OrderReport

    Raises
    ------
    DlschedError
        ``tac``/``exact`` without an oracle (before the model loads), an exact search too large.
    OutputError
        ``output`` cannot be written.
    """
    from dlsched.analyses.bounds import bounds
    from dlsched.analyses.compare import compare_orders, exact_search, order_priorities
    from dlsched.analyses.orders import UNORDERED, check_times_given
    from dlsched.formats.oracle_file import oracle_hash
    from dlsched.formats.priority_file import make_priority_file, write_priority_file

    algo, seed = choice.algo, choice.seed
    check_times_given(algo, oracle.given)  # before the model loads
    graph, times = load_timed_model(model, oracle) if oracle.given else (model.load(), None)
    search = exact_search(graph, times, choice.time_limit, max_work, reporter) if algo == "exact" else None
    priorities = dict(search.priorities) if search is not None else order_priorities(graph, algo, times, seed)
    pf = make_priority_file(graph, priorities, algo, oracle_hash(times) if times is not None else None)
    report = OrderReport(graph.name, graph.mode, pf)
    if times is not None:
        b = bounds(graph, times)
        compared = compare_orders(graph, times, [algo, UNORDERED], seed, given={algo: priorities})
        report = OrderReport(graph.name, graph.mode, pf, compared, b.upper, b.lower, search)
    if output is not None:
        write_priority_file(pf, output, fmt)  # atomic; an unwritable path is an OutputError (exit 2)
    return report
