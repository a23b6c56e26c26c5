"""The cluster-sizing lemmas' inputs, read off a model and its time oracle.

Paper ``003_*``'s lemmas take three figures that a user rarely knows by heart:
``T_C`` (computation per iteration), ``S_p`` (parameter bytes per round) and
``R_O`` (overhead that computation cannot hide, over ``T_C``). dlsched has them
all: ``T_C`` is the compute ops' time, ``S_p`` the transfers' bytes, and
``R_O`` follows from one iteration's makespan, simulated under a transfer order
or measured in a trace. Every figure keeps a note of where it came from.

Examples
--------
>>> from dlsched.dag import Graph, RECV, COMPUTE
>>> g = Graph("g")
>>> _ = g.add_op("w", RECV, bytes=4_000); _ = g.add_op("mm", COMPUTE); g.add_edge("w", "mm")
>>> inputs = lemma_inputs(g, {"w": 0.5, "mm": 2.0})
>>> inputs.compute_time, inputs.param_bytes, inputs.makespan, inputs.overhead_ratio
(2.0, 4000, 2.5, 0.25)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError


@dataclass(frozen=True)
class LemmaInputs:
    """``T_C``, ``S_p`` and ``R_O`` of one model, with the source of each.

    Attributes
    ----------
    compute_time : float
        Seconds of computation per iteration (the compute load of ``bounds``).
    param_bytes : int
        Bytes of parameters pulled per round (the recv ops' bytes).
    makespan : float
        The iteration time ``R_O`` was derived from.
    overhead_ratio : float
        ``(makespan − compute_time) / compute_time``, never below 0.
    sources : dict
        Figure name → where it came from, in words.
    """

    compute_time: float
    param_bytes: int
    makespan: float
    overhead_ratio: float
    sources: dict = field(default_factory=dict)


def lemma_inputs(graph: Graph, times: Mapping[str, float], algo: str = "tac",
                 measured_makespan: float | None = None, makespan_source: str = "") -> LemmaInputs:
    """``T_C``, ``S_p`` and ``R_O`` of ``graph`` under ``times``.

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → seconds (the time oracle).
    algo : str
        The transfer order whose simulated single-worker makespan gives ``R_O``;
        TAC by default, the order dlsched would have the hooks enforce.
    measured_makespan : float, optional
        A measured iteration time (e.g. from a trace) to use instead of the simulation.
    makespan_source : str
        How ``measured_makespan`` was obtained, for the sources.

    Raises
    ------
    DlschedError
        The model has no compute time, so no ratio can be formed.

    Notes
    -----
    ``R_O = T_O / T_C`` with ``T_O = m − T_C``: whatever part of the iteration
    ``m`` computation did not fill is overhead it could not hide. A measured
    makespan below ``T_C`` is refused: no run of this model under this oracle
    computes in less than ``T_C``, so the trace is of another model or run (or
    the oracle of another device), and ``R_O = 0`` would promise perfect scaling.
    """
    from dlsched.analyses.properties import check_times

    check_times(graph, times)
    T_C = math.fsum(float(times[op.name]) for op in graph.ops() if op.kind == COMPUTE)
    S_p = sum(op.bytes for op in graph.recvs())
    if not T_C > 0:
        raise DlschedError(f"model {graph.name!r} has no compute time under this oracle, so its overhead ratio "
                           "R_O = T_O / T_C is undefined; give --overhead-ratio by hand")
    sources = {"compute_time": f"sum of {sum(op.kind == COMPUTE for op in graph.ops()):,} compute ops' oracle times",
               "param_bytes": f"sum of {len(graph.recvs()):,} transfers' bytes"}
    if measured_makespan is None:
        from dlsched.analyses.orders import compute_order
        from dlsched.analyses.simulate import simulate

        m = simulate(graph, times, compute_order(graph, algo, times)).makespan
        sources["makespan"] = f"simulated single-worker iteration under {algo.upper()}"
    else:
        m = measured_makespan
        sources["makespan"] = makespan_source or "measured"
        if not m >= T_C * (1 - 1e-9):
            raise DlschedError(
                f"the measured iteration ({sources['makespan']}) lasts {m:.6g} s, less than the {T_C:.6g} s of "
                f"computation that model {graph.name!r} needs under this oracle, so no overhead ratio can be formed "
                "from it: the trace is of another model or run, or the oracle was measured on another device. "
                "Give a trace of this model's iteration, profile the oracle on the traced device, or give "
                "--overhead-ratio by hand")
    T_O = m - T_C
    sources["overhead_ratio"] = "(iteration − T_C) / T_C"
    return LemmaInputs(T_C, S_p, float(m), max(0.0, T_O / T_C), sources)
