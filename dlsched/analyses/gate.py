"""The CI gate: a model's figures recorded as a baseline, and judged against one.

:func:`snapshot_model` is ``dlsched snapshot``: it times the model (the
analytic oracle by default, deterministic; or an oracle file), plans the
largest batch when a device memory is given, and returns the baseline
document with the options that decided the figures. :func:`check_model` is
``dlsched check``: the same figures, recomputed with the baseline's options
(any given again override them), compared metric by metric
(:func:`~dlsched.analyses.regression.compare_metrics`), and the exit it
calls for. Reading and writing the files is :mod:`dlsched.formats.baseline`'s.

Examples
--------
>>> import os, tempfile
>>> from dlsched.formats.dag_json import save_dag
>>> from dlsched.synthetic import random_dag
>>> g, _ = random_dag(4, 2, training=True)
>>> path = os.path.join(tempfile.mkdtemp(), "m.dag.json"); save_dag(g, path)
>>> snap = snapshot_model({"model": path, "default_time": 1e-6})
>>> snap.doc["options"]["device_spec"] is None, snap.doc["metrics"]["recv_ops"]
(True, 2)
>>> result = check_model(snap.doc, {"model": path})
>>> result.regressed, result.exit_code
([], 0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import pandas as pd

from dlsched.dag import Graph
from dlsched.errors import DlschedError

from .regression import METRICS, compare_metrics, model_metrics

# The options that decide the figures: recorded in the baseline, reused by check.
OPTION_KEYS = ("mode", "batch", "ps", "ps_strategy", "buffers", "device_spec", "oracle", "default_time",
               "memory", "margin", "optimizer")
_MODEL_KEYS = ("model", "mode", "batch", "ps", "ps_strategy", "buffers")


@dataclass
class Snapshot:
    """A baseline document (``dlsched_version``, ``model``, ``options``, ``metrics``, ``op_types``,
    ``tolerances`` when any) and the graph it describes."""

    doc: dict
    graph: Graph


@dataclass
class GateCheck:
    """The verdict of :func:`check_model`.

    Attributes
    ----------
    table : DataFrame
        One row per metric (:func:`~dlsched.analyses.regression.compare_metrics`).
    regressed : list
        Metrics judged ``REGRESSED``.
    note : str or None
        Says so when the model's structure (fingerprint) changed.
    updated : bool
        The baseline is to be replaced by :attr:`doc`.
    doc : dict
        The current figures as a baseline document, keeping the old one's tolerances.
    graph : Graph
    """

    table: pd.DataFrame
    regressed: list
    note: str | None
    updated: bool
    doc: dict
    graph: Graph

    @property
    def exit_code(self) -> int:
        """1 when a metric regressed (and the baseline is not being updated), else 0."""
        return 1 if self.regressed and not self.updated else 0

    def to_dict(self) -> dict:
        return {"regressed": self.regressed, "note": self.note, "updated": self.updated,
                "fingerprint_changed": self.note is not None,
                "metrics": self.table.drop(columns="regressed").to_dict(orient="records")}


def parse_tolerances(items: Iterable[str]) -> dict[str, float]:
    """``["tac_makespan=5%", "param_count=0"]`` → ``{"tac_makespan": 0.05, "param_count": 0.0}``.

    Raises
    ------
    DlschedError
        An item without ``=``, an unknown metric, or an unreadable tolerance.

    Examples
    --------
    >>> parse_tolerances(["tac_makespan=5%", "param_count=0"])
    {'tac_makespan': 0.05, 'param_count': 0.0}
    """
    from dlsched.units import parse_fraction

    out = {}
    for item in items:
        if "=" not in item:
            raise DlschedError(f"--tolerance-for expects METRIC=TOL, got {item!r}")
        name, tol = item.split("=", 1)
        if name not in METRICS:
            raise DlschedError(f"unknown metric {name!r} in --tolerance-for; known: {', '.join(METRICS)}")
        out[name] = parse_fraction(tol)
    return out


def _gate_times(graph: Graph, options: dict) -> dict[str, float]:
    """Every op's time: from ``options['oracle']``, or the analytic estimate on ``options['device_spec']``."""
    from dlsched.profiling.oracle_times import load_times, oracle_times
    from dlsched.profiling.device_specs import load_device_spec
    from dlsched.profiling.oracle import build_oracle

    default_time = options.get("default_time")
    if options.get("oracle"):
        return load_times(options["oracle"], graph, default_time)
    built = build_oracle(graph, spec=load_device_spec(options.get("device_spec") or "cpu"), default_time=default_time)
    untimed = built.result.untimed
    if untimed:
        kinds = sorted({graph.op(n).op_type for n in untimed})
        raise DlschedError(
            f"the analytic oracle cannot cost {len(untimed)} op(s) of {graph.name!r} (op types: "
            f"{', '.join(kinds[:10])}); e.g. {', '.join(list(untimed)[:5])}. Pass --default-time SECONDS "
            "to give them a fixed time, or use --oracle with a profiled oracle.")
    return oracle_times(built.result.frame, graph, default_time, where="analytic oracle")


def snapshot_model(options: dict, tolerance_for: Iterable[str] = (),
                   load: Callable[..., Graph] | None = None) -> Snapshot:
    """Every figure the gate tracks for ``options['model']``, as a baseline document.

    Parameters
    ----------
    options : dict
        ``model`` and any of :data:`OPTION_KEYS` (missing ones are unset).
    tolerance_for : iterable of str
        ``METRIC=TOL`` tolerances to store in the baseline (:func:`parse_tolerances`).
    load : callable, optional
        Loads the model, called as :func:`dlsched.importers.loader.load_model` (the
        default) with ``model`` … ``buffers``; a command passes its own loader.

    Returns
    -------
    Snapshot

    Raises
    ------
    DlschedError
        Bad tolerances, a model or oracle that cannot be read, ops the
        analytic oracle cannot cost without ``default_time``.
    """
    from dlsched import __version__

    tolerances = parse_tolerances(tolerance_for)
    if load is None:
        from dlsched.importers.loader import load_model as load
    model_kw = {k: options[k] for k in _MODEL_KEYS if k in options}
    graph = load(**model_kw)
    largest = None
    # Before the times: on a symbolic batch the plan says to pass --batch, where the oracle could only say it
    # cannot cost the ops.
    if options.get("memory"):
        from dlsched.planning.batch import plan_batch
        from dlsched.planning.memory import static_estimate
        from dlsched.units import parse_bytes

        # The memory model reads the backward pass's liveness, so it needs the training graph.
        train = graph if graph.mode == "training" else load(**{**model_kw, "mode": "training"})
        estimate = static_estimate(train, optimizer=options.get("optimizer") or "sgd")
        largest = plan_batch(estimate, parse_bytes(options["memory"]), options.get("margin") or 0.1).batch
    times = _gate_times(graph, options)
    doc = {
        "dlsched_version": __version__,
        "model": {"spec": options["model"], "name": graph.name, "fingerprint": graph.fingerprint(),
                  "mode": graph.mode},
        "options": {k: options.get(k) for k in OPTION_KEYS},
        **model_metrics(graph, times, largest),
    }
    if tolerances:
        doc["tolerances"] = tolerances
    return Snapshot(doc, graph)


def check_model(baseline: dict, options: dict, given: Iterable[str] = (), tolerance: str = "2%",
                tolerance_for: Iterable[str] = (), update: bool = False,
                load: Callable[..., Graph] | None = None) -> GateCheck:
    """Recompute ``options['model']``'s figures with ``baseline``'s options and judge each metric.

    Parameters
    ----------
    baseline : dict
        A baseline document (:func:`dlsched.formats.baseline.read_baseline`).
    options : dict
        ``model`` and the options of this run.
    given : iterable of str
        The options of :data:`OPTION_KEYS` given for this run; they override
        the baseline's recorded ones (the others are taken from it).
    tolerance : str
        Relative change allowed per metric, e.g. ``2%``.
    tolerance_for : iterable of str
        ``METRIC=TOL`` overrides, over the baseline's own tolerances.
    update : bool
        The baseline will be replaced by the current figures: no exit for regressions.
    load : callable, optional
        See :func:`snapshot_model`.

    Returns
    -------
    GateCheck
    """
    from dlsched.units import parse_fraction

    recorded, given = baseline.get("options", {}), set(given)
    merged = {k: (options.get(k) if k in given else recorded.get(k)) for k in OPTION_KEYS}
    merged["model"] = options["model"]
    doc = snapshot_model(merged, load=load)
    tolerances = {**baseline.get("tolerances", {}), **parse_tolerances(tolerance_for)}
    table = compare_metrics(baseline["metrics"], doc.doc["metrics"], parse_fraction(tolerance), tolerances)
    old, new = baseline["model"].get("fingerprint"), doc.doc["model"]["fingerprint"]
    note = None if old == new else (f"the model's structure changed (fingerprint {old} → {new}); priority files "
                                    "made for the old model no longer apply")
    if baseline.get("tolerances"):
        doc.doc["tolerances"] = baseline["tolerances"]
    return GateCheck(table, table.loc[table["regressed"], "metric"].tolist(), note, update, doc.doc, doc.graph)
