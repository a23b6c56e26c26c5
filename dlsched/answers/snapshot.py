"""The ``snapshot`` answer: a model's figures recorded as a CI baseline (:mod:`dlsched.answers.gate`).

Examples
--------
>>> import os, tempfile
>>> from dlsched.formats.dag_json import save_dag
>>> from dlsched.synthetic import random_dag
>>> g, _ = random_dag(4, 2, training=True)
>>> path = os.path.join(tempfile.mkdtemp(), "m.dag.json"); save_dag(g, path)
>>> snap = snapshot(ModelSpec(path), GateOptions(default_time=1e-6), ["tac_makespan=5%"])
>>> snap.doc["options"]["mode"], snap.doc["model"]["mode"], snap.doc["tolerances"]
('inference', 'training', {'tac_makespan': 0.05})
"""
from __future__ import annotations

from typing import Iterable

from .gate import GateOptions, Snapshot, model_figures, parse_tolerances
from .options import ModelSpec


def snapshot(model: ModelSpec, gate: GateOptions, tolerance_for: Iterable[str] = (),
             output: str | None = None) -> Snapshot:
    """Every figure the gate tracks for ``model``, as a baseline document; with ``output``, written there.

    Parameters
    ----------
    model : ModelSpec
        Its mode is recorded as asked (``inference`` when none was); a saved DAG keeps its own.
    gate : GateOptions
        The oracle (or the analytic estimate's device) and the batch plan's memory.
    tolerance_for : iterable of str
        ``METRIC=TOL`` tolerances to store in the baseline (:func:`~dlsched.answers.gate.parse_tolerances`).
    output : str, optional
        The baseline JSON to write.

    Returns
    -------
    Snapshot

    Raises
    ------
    DlschedError
        Bad tolerances, a model or oracle that cannot be read, ops the
        analytic oracle cannot cost without ``default_time``.
    """
    tolerances = parse_tolerances(tolerance_for)
    snap = model_figures(model, gate, tolerances)
    if output is not None:
        from dlsched.formats.baseline import write_baseline

        write_baseline(snap.doc, output)
    return snap
