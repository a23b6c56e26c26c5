"""What ``dlsched snapshot`` and ``dlsched check`` share: the options that decide a model's figures, and the figures.

:func:`model_figures` times the model (the analytic oracle by default,
deterministic; or an oracle file), plans the largest batch when a device
memory is given, and returns the baseline document with the options that
decided the figures (:mod:`dlsched.answers.snapshot`);
:mod:`dlsched.answers.check` recomputes them with a baseline's options and
judges each metric. Reading and writing the files is
:mod:`dlsched.formats.baseline`'s.

Examples
--------
>>> import os, tempfile
>>> from dlsched.formats.dag_json import save_dag
>>> from dlsched.synthetic import random_dag
>>> g, _ = random_dag(4, 2, training=True)
>>> path = os.path.join(tempfile.mkdtemp(), "m.dag.json"); save_dag(g, path)
>>> snap = model_figures(ModelSpec(path), GateOptions(default_time=1e-6))
>>> snap.doc["options"]["device_spec"] is None, snap.doc["metrics"]["recv_ops"]
(True, 2)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

import pandas as pd

from dlsched.analyses.regression import METRICS, model_metrics
from dlsched.dag import Graph
from dlsched.errors import DlschedError

from .options import ModelSpec

# The options that decide the figures: recorded in the baseline, reused by check.
OPTION_KEYS = ("mode", "batch", "ps", "ps_strategy", "buffers", "device_spec", "oracle", "default_time",
               "memory", "margin", "optimizer")
#: The mode recorded when none was asked for: a baseline's ``inference`` reads back as unset.
DEFAULT_MODE = "inference"


@dataclass(frozen=True)
class GateOptions:
    """The options beside MODEL's that decide the figures (all recorded in the baseline).

    Attributes
    ----------
    oracle : str, optional
        An oracle file instead of the analytic estimate.
    device_spec : str, optional
        The analytic estimate's device: ``cpu`` (the default), ``a100``, ``h100`` or a YAML file.
    default_time : float, optional
        Seconds for ops the oracle lacks.
    memory : str, optional
        Device memory for the largest-batch figure, e.g. ``16GiB``.
    margin : float, optional
        Memory headroom [default: 0.1].
    optimizer : str, optional
        Optimizer state counted by the batch plan [default: sgd].
    """

    oracle: str | None = None
    device_spec: str | None = None
    default_time: float | None = None
    memory: str | None = None
    margin: float | None = None
    optimizer: str | None = None


def recorded_options(model: ModelSpec, gate: GateOptions) -> dict:
    """The options of :data:`OPTION_KEYS` as a baseline records them."""
    values = {**model.import_options(), **vars(gate)}
    values["mode"] = model.mode or DEFAULT_MODE
    return {k: values[k] for k in OPTION_KEYS}


def from_recorded(path: str, options: dict) -> tuple[ModelSpec, GateOptions]:
    """The option groups of recorded ``options``; a recorded :data:`DEFAULT_MODE` is unset (a saved DAG keeps its own)."""
    mode = options.get("mode")
    model = ModelSpec(path, mode=None if mode == DEFAULT_MODE else mode, batch=options.get("batch"),
                      ps=options.get("ps"), ps_strategy=options.get("ps_strategy"),
                      buffers=bool(options.get("buffers")))
    return model, GateOptions(**{k: options.get(k) for k in vars(GateOptions())})


@dataclass
class Snapshot:
    """A baseline document (``dlsched_version``, ``model``, ``options``, ``metrics``, ``op_types``,
    ``tolerances`` when any) and the graph it describes."""

    doc: dict
    graph: Graph


@dataclass
class GateCheck:
    """The verdict of :func:`dlsched.answers.check.check`.

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


def gate_times(graph: Graph, gate: GateOptions) -> dict[str, float]:
    """Every op's time: from ``gate.oracle``, or the analytic estimate on ``gate.device_spec`` (``cpu``)."""
    from dlsched.profiling.oracle_times import load_times, oracle_times
    from dlsched.profiling.device_specs import load_device_spec
    from dlsched.profiling.oracle import build_oracle

    default_time = gate.default_time
    if gate.oracle:
        return load_times(gate.oracle, graph, default_time)
    built = build_oracle(graph, spec=load_device_spec(gate.device_spec or "cpu"), default_time=default_time)
    untimed = built.result.untimed
    if untimed:
        kinds = sorted({graph.op(n).op_type for n in untimed})
        raise DlschedError(
            f"the analytic oracle cannot cost {len(untimed)} op(s) of {graph.name!r} (op types: "
            f"{', '.join(kinds[:10])}); e.g. {', '.join(list(untimed)[:5])}. Pass --default-time SECONDS "
            "to give them a fixed time, or use --oracle with a profiled oracle.")
    return oracle_times(built.result.frame, graph, default_time, where="analytic oracle")


def model_figures(model: ModelSpec, gate: GateOptions, tolerances: dict | None = None) -> Snapshot:
    """Every figure the gate tracks for ``model``, as a baseline document (``tolerances`` stored in it).

    Raises
    ------
    DlschedError
        A model or oracle that cannot be read, ops the analytic oracle cannot
        cost without ``default_time``.
    """
    from dlsched import __version__

    graph = model.load()
    largest = None
    # Before the times: on a symbolic batch the plan says to pass --batch, where the oracle could only say it
    # cannot cost the ops.
    if gate.memory:
        from dlsched.planning.batch import plan_batch
        from dlsched.planning.memory import static_estimate
        from dlsched.units import parse_bytes

        # The memory model reads the backward pass's liveness, so it needs the training graph.
        train = graph if graph.mode == "training" else replace(model, mode="training").load()
        estimate = static_estimate(train, optimizer=gate.optimizer or "sgd")
        largest = plan_batch(estimate, parse_bytes(gate.memory), gate.margin or 0.1).batch
    times = gate_times(graph, gate)
    doc = {
        "dlsched_version": __version__,
        "model": {"spec": model.path, "name": graph.name, "fingerprint": graph.fingerprint(),
                  "mode": graph.mode},
        "options": recorded_options(model, gate),
        **model_metrics(graph, times, largest),
    }
    if tolerances:
        doc["tolerances"] = tolerances
    return Snapshot(doc, graph)
