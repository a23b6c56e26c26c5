"""The ``bounds`` answer: a model's bounds under an oracle, a makespan rated against them, and a trace rated.

A model with an oracle gives TicTac's ``U``, ``L``, ``S`` and the
dependency-aware ``L_dep`` (DESIGN §4.1); a measured makespan (or a trace's
span) is rated against them. A dlsched Chrome trace (``simulate
--trace-out``, the PyTorch hook) is rated per worker and iteration from its
own realised op times, with or without a model
(:func:`dlsched.analyses.multiworker_bounds.rate_trace`, DESIGN §4.6).

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(20, 5, training=True, seed=3)
>>> r = bounds(ModelSpec.of(g), OracleSpec.of(t), makespan=0.5)
>>> sorted(k for k in r.figures if k in ("upper", "lower", "efficiency", "model_error"))
['efficiency', 'lower', 'model_error', 'upper']
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .options import ModelSpec, OracleSpec, load_timed_model


@dataclass(frozen=True)
class BoundsReport:
    """What :func:`bounds` answers.

    Attributes
    ----------
    figures : dict
        The JSON object: with a model, ``upper``, ``lower``, ``speedup``,
        ``loads``, the dependency bound, and with a makespan its
        ``efficiency`` and ``model_error``; with a rated trace, ``trace``
        (its summary) plus ``per_iteration`` and ``per_worker`` rows.
    bounds : Bounds or None
        The model's bounds (None without a model).
    rating, dependency_rating : Rating or None
        The makespan against ``[L, U]`` and ``[L_dep, U]``.
    trace : TraceRating or None
        The trace's workers and iterations, rated.
    """

    figures: dict
    bounds: object = None
    rating: object = None
    dependency_rating: object = None
    trace: object = None


def bounds(model: ModelSpec, oracle: OracleSpec, makespan: float | None = None,
           trace: str | Path | None = None) -> BoundsReport:
    """Bounds of ``model`` under ``oracle``, the ``makespan`` (or ``trace``'s span) rated, ``trace`` rated per worker.

    Parameters
    ----------
    model, oracle : ModelSpec, OracleSpec
        Both given, or (to rate ``trace`` alone) neither.
    makespan : float, optional
        A measured iteration time in seconds.
    trace : str or Path, optional
        A Chrome trace. With a model, its span is the makespan; a trace in
        dlsched's schema (args kind, worker, resource) is also rated per
        worker and iteration, and each iteration against the oracle's
        bounds for its workers. Without a model it must be in that schema.

    Raises
    ------
    TraceError
        An unreadable trace, or (without a model) one not in dlsched's schema.
    """
    from dlsched.analyses.multiworker_bounds import rate_trace

    figures: dict = {}
    graph = times = b = rating = dep_rating = rated = None
    if model.given:
        from dlsched.analyses.bounds import bounds as model_bounds
        from dlsched.analyses.bounds import rate_makespan, trace_makespan
        from dlsched.analyses.dependency_bound import dependency_bound

        graph, times = load_timed_model(model, oracle)
        b, dep = model_bounds(graph, times), dependency_bound(graph, times)
        if trace is not None:
            makespan = trace_makespan(trace)
            _check_span(trace, makespan, graph, b)
            from dlsched.profiling.trace_import import check_trace_of_model

            check_trace_of_model(trace, graph)
        figures = {"model": graph.name, "mode": graph.mode, "upper": b.upper, "lower": b.lower,
                   "speedup": b.speedup, "loads": dict(b.loads), "dependency_lower": dep.lower,
                   "dependency_resource": dep.resource, "critical_path": dep.critical_path}
        if makespan is not None:
            rating, dep_rating = rate_makespan(b.upper, b.lower, makespan), rate_makespan(b.upper, dep.lower, makespan)
            figures.update(makespan=makespan, efficiency=rating.efficiency, model_error=rating.model_error,
                           dependency_efficiency=dep_rating.efficiency)
    if trace is not None:
        rated = rate_trace(trace, graph, times, required=graph is None)
        if rated is not None:
            figures.update(trace=rated.summary(), per_iteration=rated.per_iteration.to_dict(orient="records"),
                           per_worker=rated.per_worker.to_dict(orient="records"))
    return BoundsReport(figures, b, rating, dep_rating, rated)


def _check_span(trace, span: float, graph, b) -> None:
    """Refuse a trace whose span is shorter than the model's busiest compute resource.

    No run of the model under its oracle computes faster than that, so the trace
    is of another model or run; rating it would print a model error as if the
    figures were comparable.
    """
    from dlsched.formats.kineto_trace import TraceError

    compute = {op.resource for op in graph.compute_ops()}
    busiest = max((b.loads[r] for r in compute if r in b.loads), default=0.0)
    if span < busiest * (1 - 1e-9):
        raise TraceError(f"{trace}: the trace spans {span:.6g} s, less than the {busiest:.6g} s that model "
                         f"{graph.name!r} computes on one resource under this oracle, so it is not a trace of this "
                         "model's iteration (another model, a shorter run, or an oracle of another device). Give a "
                         "trace of this model, or rate a measured time with --makespan")
