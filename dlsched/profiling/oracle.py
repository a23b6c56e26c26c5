"""Assemble a time oracle: compute rows + transfer rows, and what could not be timed (DESIGN §3).

A profiler, a trace import or the analytic roofline gives one row per
compute op it timed and a ``{op: reason}`` dict for the ones it could not;
this module adds a row per recv/send from the network model, fills untimed
ops with ``--default-time`` when given (``source = "default"``), and reports
what is missing. :func:`build_oracle` picks the source of the compute times
and the link of the transfers and records where each came from;
:func:`assemble_oracle` joins the rows.

Policy for untimed ops: the oracle is still written without them (it is
useful as it stands), the command warns and exits 0, and analyses refuse the
partial oracle until they are given ``--default-time``
(:func:`dlsched.exporters.oracle_file.oracle_times`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from dlsched.dag import Graph
from dlsched.errors import DlschedError

from .device_specs import DeviceSpec
from .network import DEFAULT_BANDWIDTH, DEFAULT_LATENCY, transfer_rows
from .schema import oracle_frame, oracle_row


def _is_transfer(frame: pd.DataFrame) -> pd.Series:
    # Transfers run on a parameter-server link, compute ops on "compute:N"; the source says neither
    # (analytic transfers are labelled "analytic" like the compute rows).
    return ~frame["resource"].astype(str).str.startswith("compute:")


@dataclass
class OracleResult:
    """An assembled oracle and its report.

    Attributes
    ----------
    frame : DataFrame
        Rows in canonical op order (``op, time, runs, median, op_type,
        resource, source`` and ``bytes`` for transfers).
    untimed : dict
        Compute op → reason, for ops with no row.
    defaulted : dict
        Compute op → reason, for ops given ``default_time``.
    extra : list
        Ops the source timed that are not compute ops of the graph (dropped).
    """

    frame: pd.DataFrame
    untimed: dict = field(default_factory=dict)
    defaulted: dict = field(default_factory=dict)
    extra: list = field(default_factory=list)
    bandwidth: float = 0.0
    latency: float = 0.0

    @property
    def compute(self) -> pd.DataFrame:
        return self.frame[~_is_transfer(self.frame)]

    def summary(self, graph: Graph, top: int = 10) -> dict:
        """Figures for the closing table and ``--json``."""
        df = self.frame
        is_xfer = _is_transfer(df)
        comp, xfer = df[~is_xfer], df[is_xfer]
        n_compute = len(graph.compute_ops())
        slow = comp.sort_values("time", ascending=False).head(top)
        return {
            "ops": int(len(df)),  # rows written
            "graph_ops": len(graph),
            "compute_ops": n_compute,
            "timed": int((comp["source"] != "default").sum()),
            "defaulted": dict(self.defaulted),
            "untimed": dict(self.untimed),
            "total_compute_time": float(comp["time"].sum()),
            "transfers": int(len(xfer)),
            "total_transfer_time": float(xfer["time"].sum()),
            "transfer_bytes": int(xfer["bytes"].sum()) if "bytes" in xfer else 0,
            "bandwidth": self.bandwidth,
            "latency": self.latency,
            "slowest": [{"op": r.op, "time": float(r.time), "op_type": r.op_type, "source": r.source}
                        for r in slow.itertuples()],
            "extra_ops_dropped": list(self.extra),
        }


def assemble_oracle(graph: Graph, compute: pd.DataFrame | None, untimed: dict[str, str] | None,
                    bandwidth: float, latency: float, default_time: float | None = None,
                    transfer_source: str = "network-model") -> OracleResult:
    """Combine compute timings with network-model transfer rows for every op of ``graph``.

    Parameters
    ----------
    graph : Graph
    compute : DataFrame or None
        A profiler's rows (at least ``op`` and ``time``).
    untimed : dict
        ``{op: reason}`` from the profiler; compute ops with neither a row nor
        a reason get the reason "no time was produced for it".
    bandwidth, latency : float
        Bytes/s and seconds for ``latency + bytes / bandwidth``.
    default_time : float, optional
        Seconds given to untimed compute ops (``source = "default"``).
    transfer_source : str
        The ``source`` of the transfer rows: ``network-model``, or
        ``analytic`` when the link is part of an analytic estimate.

    Returns
    -------
    OracleResult

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(3, 1)
    >>> rows = pd.DataFrame({"op": ["f0", "f1"], "time": [0.1, 0.2]})
    >>> r = assemble_oracle(g, rows, {}, 1e9, 0.0, default_time=0.5)
    >>> r.untimed, sorted(r.defaulted), len(r.frame) == len(g)
    ({}, ['f2'], True)
    """
    untimed = dict(untimed or {})
    compute_ops = {op.name: op for op in graph.compute_ops()}
    rows: dict[str, dict] = {}
    extra: list[str] = []
    if compute is not None and len(compute):
        for rec in compute.to_dict("records"):
            name = str(rec["op"])
            if name not in compute_ops:
                extra.append(name)
                continue
            op = compute_ops[name]
            source = rec.get("source")
            rows[name] = oracle_row(op, rec["time"], runs=rec["runs"] if pd.notna(rec.get("runs")) else 1,
                                    median=rec["median"] if pd.notna(rec.get("median")) else None,
                                    source=source if isinstance(source, str) and source else "profiled")
    defaulted: dict[str, str] = {}
    for name, op in compute_ops.items():
        if name in rows:
            untimed.pop(name, None)
            continue
        reason = untimed.pop(name, None) or "no time was produced for it"
        if default_time is None:
            untimed[name] = reason
        else:
            defaulted[name] = reason
            rows[name] = oracle_row(op, default_time, runs=0, source="default")
    # Reasons for names that are not compute ops of this graph are not ours to report.
    untimed = {k: v for k, v in untimed.items() if k in compute_ops}
    xfer = transfer_rows(graph, bandwidth, latency, source=transfer_source)
    order = {op.name: op.index for op in graph.ops()}
    comp_df = oracle_frame(rows.values())
    frame = pd.concat([comp_df, xfer], ignore_index=True) if len(xfer) else comp_df
    if "bytes" in frame:
        frame["bytes"] = frame["bytes"].fillna(0).astype("int64")
    frame = frame.iloc[sorted(range(len(frame)), key=lambda i: order[frame["op"].iat[i]])].reset_index(drop=True)
    frame["runs"] = frame["runs"].astype("int64")
    return OracleResult(frame=frame, untimed=untimed, defaulted=defaulted, extra=extra,
                        bandwidth=float(bandwidth), latency=float(latency))


@dataclass
class BuiltOracle:
    """An oracle from :func:`build_oracle`, and where each of its figures came from.

    Attributes
    ----------
    graph : Graph
    result : OracleResult
        The rows (what is written) and the ops with no time or the default time.
    device : str
        Where the compute times were taken: ``cpu`` or ``cuda``, or
        ``analytic:NAME`` for the roofline of device spec NAME.
    runs : int or None
        Timed runs per op when the model was run; ``None`` for a trace or an estimate.
    network : dict
        The link of the transfer rows: its ``source`` (``flags``, ``device spec
        NAME`` or ``measured``), ``bandwidth`` (bytes/s), ``latency`` (s), and a
        measurement's figures.
    fused : dict
        Op → "fused into X: …", for ops run inside another op's kernel (time 0; X holds the kernel's time).
    trace : dict or None
        The trace file and its coverage, when the times came from a trace.
    default_time : float or None
        Seconds given to compute ops that could not be timed.
    """

    graph: Graph
    result: OracleResult
    device: str
    runs: int | None
    network: dict
    fused: dict = field(default_factory=dict)
    trace: dict | None = None
    default_time: float | None = None

    def to_dict(self) -> dict:
        """The report: model, source of the times, :meth:`OracleResult.summary`, fused ops, link, trace coverage."""
        g = self.graph
        info = {"model": g.name, "mode": g.mode, "device": self.device, "runs": self.runs,
                **self.result.summary(g), "fused": self.fused, "network": self.network,
                "default_time": self.default_time}
        if self.trace is not None:
            info["trace"] = self.trace
        return info


def build_oracle(graph: Graph, *, spec: DeviceSpec | None = None, trace: str | None = None, model: str | None = None,
                 device: str = "cpu", runs: int = 5, warmup: int = 1, bandwidth: float | None = None,
                 latency: float | None = None, measure: Callable[[], Any] | None = None,
                 default_time: float | None = None, progress: Callable[[str], Any] | None = None) -> BuiltOracle:
    """Time every op of ``graph``: compute ops from one source, transfers from one link, each computed once.

    Parameters
    ----------
    graph : Graph
    spec, trace, model
        The source of the compute times, exactly one: a device spec (the
        analytic roofline, :mod:`dlsched.profiling.analytic`), a trace file
        (:mod:`dlsched.profiling.trace_import`), or the model file ``graph``
        was imported from, run by its framework's profiler.
    device : {"cpu", "cuda"}
        Where ``model`` runs.
    runs, warmup : int
        Timed and untimed runs of ``model``.
    bandwidth, latency : float, optional
        The link of the transfer rows (bytes/s, s). Either one left ``None``
        comes from ``spec`` when there is one, else from
        ``network.DEFAULT_BANDWIDTH`` / ``DEFAULT_LATENCY``.
    measure : callable, optional
        Returns a measured link (:class:`~dlsched.profiling.network.LinkMeasurement`)
        that replaces ``bandwidth`` and ``latency``. It is called after a
        trace is read and before the model runs, so a dead peer fails in seconds.
    default_time : float, optional
        Seconds for compute ops that could not be timed.
    progress : callable, optional
        ``progress(description)`` opens a progress report for the profiler's
        runs: a context manager giving the ``progress(done, total)`` callback
        (e.g. ``dlsched.cli.common.progress``).

    Returns
    -------
    BuiltOracle

    Raises
    ------
    DlschedError
        Not exactly one source, or one that fails (see each source).

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> from dlsched.profiling.device_specs import BUILTIN
    >>> g, _ = random_dag(3, 1)
    >>> built = build_oracle(g, spec=BUILTIN["h100"], default_time=1e-6)
    >>> sorted(set(built.result.frame["source"])), built.device, built.network["source"]
    (['analytic', 'default'], 'analytic:h100', 'device spec h100')
    >>> built.to_dict()["transfers"] == len(g.recvs()) + len(g.sends())
    True
    """
    if sum(x is not None for x in (spec, trace, model)) != 1:
        raise DlschedError("an oracle takes its compute times from exactly one of a device spec, a trace or a model")
    coverage = None
    if trace is not None:
        from .trace_import import import_trace

        imported = import_trace(trace, graph)
        compute, untimed, coverage = imported.frame, imported.untimed, imported.coverage
    network = _link(spec, bandwidth, latency, measure)
    if spec is not None:
        from .analytic import analytic_oracle

        compute, untimed = analytic_oracle(graph, spec, transfers=False)
    elif model is not None:
        profile = _profiler(model)
        with progress(f"profiling {graph.name} on {device}") if progress else contextlib.nullcontext() as bar:
            compute, untimed = profile(model, graph, device=device, runs=runs, warmup=warmup, progress=bar)
    # The transfers of an analytic estimate are part of it, even on a link given by flags or measured.
    result = assemble_oracle(graph, compute, untimed, network["bandwidth"], network["latency"], default_time,
                             transfer_source="analytic" if spec is not None else "network-model")
    names = set(result.frame["op"])
    fused = {k: v for k, v in compute.attrs.get("fused", {}).items() if k in names}
    return BuiltOracle(graph, result, device=f"analytic:{spec.name}" if spec is not None else device,
                       runs=runs if model is not None else None, network=network, fused=fused,
                       trace=None if coverage is None else {"file": str(trace), **coverage},
                       default_time=default_time)


def _link(spec: DeviceSpec | None, bandwidth: float | None, latency: float | None,
          measure: Callable[[], Any] | None) -> dict:
    """The transfers' link, with where it came from (``BuiltOracle.network``)."""
    if measure is not None:
        return {"source": "measured", **measure().to_dict()}
    from dlsched.units import parse_bandwidth, parse_duration

    if bandwidth is None:
        bandwidth = spec.network_bandwidth if spec is not None else parse_bandwidth(DEFAULT_BANDWIDTH)
    if latency is None:
        latency = spec.network_latency if spec is not None else parse_duration(DEFAULT_LATENCY)
    return {"source": f"device spec {spec.name}" if spec is not None else "flags", "bandwidth": bandwidth,
            "latency": latency}


_PROFILERS = {"torch": ("dlsched.profiling.torch_profiler", "profile_torch"),
              "onnx": ("dlsched.profiling.onnx_profiler", "profile_onnx"),
              "graphdef": ("dlsched.profiling.tf_profiler", "profile_tf"),
              "savedmodel": ("dlsched.profiling.tf_profiler", "profile_tf")}


def runnable_format(model: str) -> str:
    """``model``'s format (:func:`dlsched.loader.detect_format`) when a framework profiler can run it.

    Raises
    ------
    DlschedError
        A ``.dag.json``: it holds no runnable model.

    Examples
    --------
    >>> runnable_format("examples/torch_models.py:small_cnn")
    'torch'
    """
    from dlsched.loader import detect_format

    fmt = detect_format(model)
    if fmt not in _PROFILERS:
        raise DlschedError(f"{model}: a .dag.json holds no runnable model, so it cannot be profiled; pass "
                           "--from-trace with a trace of the model, or profile the original model file")
    return fmt


def _profiler(model: str) -> Callable:
    """The framework profiler for ``model``'s format, as ``fn(model, graph, **kw)``."""
    import importlib

    fmt = runnable_format(model)
    mod, attr = _PROFILERS[fmt]
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError):
        raise DlschedError(f"profiling {fmt} models is not available in this installation ({mod}.{attr} is "
                           "missing); use --from-trace with an existing trace instead") from None
