"""The ``check`` answer: a model's figures recomputed and judged against a CI baseline (:mod:`dlsched.answers.gate`).

The figures are recomputed with the baseline's options, any given again
overriding the recorded one, and compared metric by metric
(:func:`~dlsched.analyses.regression.compare_metrics`); the verdict says
which exit it calls for.

Examples
--------
>>> import os, tempfile
>>> from dlsched.formats.dag_json import save_dag
>>> from dlsched.synthetic import random_dag
>>> from dlsched.answers.snapshot import snapshot
>>> g, _ = random_dag(4, 2, training=True)
>>> path = os.path.join(tempfile.mkdtemp(), "m.dag.json"); save_dag(g, path)
>>> snap = snapshot(ModelSpec(path), GateOptions(default_time=1e-6))
>>> result = check(snap.doc, ModelSpec(path), GateOptions())
>>> result.regressed, result.exit_code
([], 0)
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterable, Mapping

from dlsched.analyses.regression import compare_metrics

from .gate import OPTION_KEYS, GateCheck, GateOptions, from_recorded, model_figures, parse_tolerances, \
    recorded_options
from .options import ModelSpec


def check(baseline: str | Path | Mapping, model: ModelSpec, gate: GateOptions, given: Iterable[str] = (),
          tolerance: str = "2%", tolerance_for: Iterable[str] = (), update: bool = False,
          junit: str | None = None) -> GateCheck:
    """Recompute ``model``'s figures with ``baseline``'s options and judge each metric.

    Parameters
    ----------
    baseline : str, Path or mapping
        A baseline file (:func:`dlsched.formats.baseline.read_baseline`), or its document.
    model, gate : ModelSpec, GateOptions
        MODEL and the options of this run.
    given : iterable of str
        The options of :data:`~dlsched.answers.gate.OPTION_KEYS` given for this
        run; they override the baseline's recorded ones (the others are taken from it).
    tolerance : str
        Relative change allowed per metric, e.g. ``2%``.
    tolerance_for : iterable of str
        ``METRIC=TOL`` overrides, over the baseline's own tolerances.
    update : bool
        The baseline is replaced by the current figures (rewritten when it is a
        file): no exit for regressions.
    junit : str, optional
        Also write a JUnit XML report there.

    Returns
    -------
    GateCheck
    """
    from dlsched.units import parse_fraction

    if isinstance(baseline, Mapping):
        path, doc = None, baseline
    else:
        from dlsched.formats.baseline import read_baseline

        path, doc = baseline, read_baseline(baseline)
    recorded, given = doc.get("options", {}), set(given)
    now = recorded_options(model, gate)
    merged = {k: (now[k] if k in given else recorded.get(k)) for k in OPTION_KEYS}
    spec, options = from_recorded(model.path, merged)
    if "mode" in given:  # asked for on this run: loaded as asked, inference included
        spec = replace(spec, mode=model.mode)
    snap = model_figures(spec, options)
    tolerances = {**doc.get("tolerances", {}), **parse_tolerances(tolerance_for)}
    table = compare_metrics(doc["metrics"], snap.doc["metrics"], parse_fraction(tolerance), tolerances)
    old, new = doc["model"].get("fingerprint"), snap.doc["model"]["fingerprint"]
    note = None if old == new else (f"the model's structure changed (fingerprint {old} → {new}); priority files "
                                    "made for the old model no longer apply")
    if doc.get("tolerances"):
        snap.doc["tolerances"] = doc["tolerances"]
    result = GateCheck(table, table.loc[table["regressed"], "metric"].tolist(), note, update, snap.doc, snap.graph)
    if junit:
        from dlsched.formats.junit import write_junit

        write_junit(result.table, junit, suite=result.graph.name, note=result.note)
    if update and path is not None:
        from dlsched.formats.baseline import write_baseline

        write_baseline(result.doc, path)
    return result
