"""Model figures for the CI gate, and their comparison against a baseline.

:func:`model_metrics` computes what ``dlsched snapshot`` records;
:func:`compare_metrics` is what ``dlsched check`` judges, one row per metric.
"""
from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from dlsched.dag import Graph

# metric -> (direction, description). "up": a rise is a regression; "down": a
# fall is; "info": shown, never judged.
METRICS: dict[str, tuple[str, str]] = {
    "ops": ("up", "ops in the DAG"),
    "compute_ops": ("up", "compute ops"),
    "recv_ops": ("up", "parameter transfers"),
    "send_ops": ("up", "gradient transfers"),
    "param_count": ("up", "parameters"),
    "param_bytes": ("up", "parameter bytes"),
    "upper_bound": ("up", "U: every op serialised (s)"),
    "lower_bound": ("up", "L: busiest resource (s)"),
    "speedup_bound": ("info", "S: most any order can gain"),
    "critical_path": ("up", "longest dependency chain (s)"),
    "tac_makespan": ("up", "makespan under TAC (s)"),
    "tac_efficiency": ("down", "efficiency E under TAC"),
    "random_makespan": ("up", "makespan, random order, mean over seeds (s)"),
    "random_efficiency": ("down", "efficiency E, random order"),
    "largest_batch": ("down", "largest batch within the memory budget"),
}


def critical_path_time(graph: Graph, times: dict[str, float]) -> float:
    """Length in seconds of the longest dependency chain (ops weighted by time)."""
    finish: dict[str, float] = {}
    for op in graph.topological_order():
        start = max((finish[p] for p in graph.predecessors(op.name)), default=0.0)
        finish[op.name] = start + times[op.name]
    return max(finish.values(), default=0.0)


def model_metrics(graph: Graph, times: dict[str, float], largest_batch: int | None = None) -> dict:
    """Every figure the CI gate tracks for ``graph`` under the oracle ``times``.

    Returns
    -------
    dict
        ``metrics`` (name → number, see :data:`METRICS`) and ``op_types``
        (compute op type → count). Deterministic: the random order is the mean
        over seeds 0–4 (:func:`dlsched.analyses.compare.random_seeds` at seed 0).
    """
    from .bounds import bounds, schedule_efficiency
    from .compare import compare_orders
    from .summary import size_figures

    b = bounds(graph, times)
    tac, rand = compare_orders(graph, times, ["tac", "random"], seed=0).makespan.tolist()
    metrics = {
        **size_figures(graph),
        "upper_bound": b.upper,
        "lower_bound": b.lower,
        "speedup_bound": b.speedup,
        "critical_path": critical_path_time(graph, times),
        "tac_makespan": tac,
        "tac_efficiency": schedule_efficiency(b.upper, b.lower, tac),
        "random_makespan": rand,
        "random_efficiency": schedule_efficiency(b.upper, b.lower, rand),
    }
    if largest_batch is not None:
        metrics["largest_batch"] = largest_batch
    # Round floats so that baselines are byte-identical across runs and platforms.
    metrics = {k: (float(f"{v:.9g}") if isinstance(v, float) else v) for k, v in metrics.items()}
    types = Counter(op.op_type or "?" for op in graph.compute_ops())
    return {"metrics": metrics, "op_types": dict(sorted(types.items()))}


def compare_metrics(baseline: dict, current: dict, tolerance: float = 0.02,
                    tolerances: dict[str, float] | None = None) -> pd.DataFrame:
    """Judge each metric: ``ok``, ``improved``, ``REGRESSED``, ``changed`` (info) or ``new``/``missing``.

    Parameters
    ----------
    baseline, current : dict
        Metric name → value.
    tolerance : float
        Relative change allowed before a verdict (0.02 = 2%).
    tolerances : dict, optional
        Per-metric overrides.

    Returns
    -------
    DataFrame
        Columns ``metric, baseline, now, change, tolerance, verdict, regressed``.
    """
    tolerances = tolerances or {}
    rows = []
    for name in list(METRICS) + sorted((set(baseline) | set(current)) - set(METRICS)):
        if name not in baseline and name not in current:
            continue
        direction = METRICS.get(name, ("info", ""))[0]
        tol = tolerances.get(name, tolerance)
        base, now = baseline.get(name), current.get(name)
        if base is None or now is None:
            rows.append({"metric": name, "baseline": base, "now": now, "change": None, "tolerance": tol,
                         "verdict": "new" if base is None else "missing", "regressed": False})
            continue
        change = (now - base) / abs(base) if base else (0.0 if now == base else math.copysign(math.inf, now - base))
        worse = change if direction == "up" else -change
        if direction == "info":
            verdict = "ok" if abs(change) <= tol else "changed"
        elif worse > tol + 1e-12:
            verdict = "REGRESSED"
        elif worse < -(tol + 1e-12):
            verdict = "improved"
        else:
            verdict = "ok"
        rows.append({"metric": name, "baseline": base, "now": now, "change": change, "tolerance": tol,
                     "verdict": verdict, "regressed": verdict == "REGRESSED"})
    return pd.DataFrame(rows, columns=["metric", "baseline", "now", "change", "tolerance", "verdict", "regressed"])
