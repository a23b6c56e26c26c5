"""Assemble a time oracle: compute rows + transfer rows, and what could not be timed (DESIGN §3).

A profiler, a trace import or the analytic roofline gives one row per
compute op it timed and a ``{op: reason}`` dict for the ones it could not;
this module adds a row per recv/send from the network model, fills untimed
ops with ``--default-time`` when given (``source = "default"``), and reports
what is missing. :func:`build_oracle` picks the source of the compute times
and the link of the transfers and records where each came from, and what the
times were measured at (batch, mode, device, threads: :meth:`BuiltOracle.meta`,
written into the oracle file); :func:`assemble_oracle` joins the rows.

Noise: a profile on a busy machine is not reproducible. :func:`noisy_ops`
names the ops whose median over the runs exceeds their minimum by more than
``NOISE_SPREAD`` where that excess weighs on the total, and
:func:`build_oracle` warns about them.

Policy for untimed ops: the oracle is still written without them (it is
useful as it stands), the command warns and exits 0, and analyses refuse the
partial oracle until they are given ``--default-time``
(:func:`dlsched.profiling.oracle_times.oracle_times`).
"""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from dlsched.dag import Graph
from dlsched.errors import DlschedError, DlschedWarning

from .device_specs import DeviceSpec
from .network import DEFAULT_BANDWIDTH, DEFAULT_LATENCY, transfer_rows
from .schema import oracle_frame, oracle_row


# An op is noisy when its median over the runs is more than twice its minimum (NOISE_SPREAD) and the excess is at
# least NOISE_SHARE of the profile's compute time: tiny ops vary that much on any machine, and only ops that weigh
# on the totals are worth a warning. On this two-core machine, at one thread, no op of BERT or ResNet-50 reaches
# this unless a load spike hits; at two threads while other jobs run, 7 to 14 of BERT's ops do (and its Σ median
# reaches 4 to 7 × Σ minimum).
NOISE_SPREAD = 1.0
NOISE_SHARE = 0.01


def noisy_ops(frame: pd.DataFrame, spread: float = NOISE_SPREAD, share: float = NOISE_SHARE) -> list[dict]:
    """The profiled ops whose times varied between runs, the largest excess of the median over the minimum first.

    Examples
    --------
    >>> df = pd.DataFrame({"op": ["a", "b", "c"], "time": [1.0, 1.0, 1e-4], "median": [1.5, 3.0, 1e-3],
    ...                    "runs": 5, "source": "profiled"})
    >>> [(r["op"], r["spread"]) for r in noisy_ops(df)]   # c varies by 9×, but weighs nothing
    [('b', 2.0)]
    """
    if "median" not in frame or "runs" not in frame:
        return []
    rows = frame[(frame["source"] == "profiled") & (frame["runs"] > 1) & (frame["time"] > 0)]
    excess = rows["median"] - rows["time"]
    noisy = rows[(excess > spread * rows["time"]) & (excess >= share * rows["time"].sum())]
    noisy = noisy.loc[excess[noisy.index].sort_values(ascending=False).index]
    return [{"op": r.op, "time": float(r.time), "median": float(r.median), "spread": float(r.median / r.time - 1)}
            for r in noisy.itertuples()]


def run_spread(frame: pd.DataFrame) -> float | None:
    """Σ median / Σ minimum − 1 over the profiled ops: how much slower a typical run was than the best one."""
    if "median" not in frame or "runs" not in frame:
        return None
    rows = frame[(frame["source"] == "profiled") & (frame["runs"] > 1)]
    total = rows["time"].sum()
    return float(rows["median"].sum() / total - 1) if total > 0 else None


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
    # A trace's rows also carry the host time beside the GPU time, and what recomputation added.
    kept = [c for c in ("host_time", "recompute") if compute is not None and c in compute.columns]
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
                                    source=source if isinstance(source, str) and source else "profiled",
                                    **{c: rec[c] for c in kept})
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
    comp_df = oracle_frame(rows.values(), extra=kept)
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
    batch : int or None
        The batch the times describe (``None``: unknown, e.g. a trace of a
        model with a symbolic batch).
    batch_picked : bool
        The model's batch dimension is symbolic and the profiler chose ``batch``.
    threads : int or None
        Intra-op threads of the framework profiler (``None`` for a trace or an estimate).
    """

    graph: Graph
    result: OracleResult
    device: str
    runs: int | None
    network: dict
    fused: dict = field(default_factory=dict)
    trace: dict | None = None
    default_time: float | None = None
    batch: int | None = None
    batch_picked: bool = False
    threads: int | None = None

    def meta(self) -> dict:
        """What the times were measured at, for the oracle file (``write_oracle(..., meta=...)``)."""
        import dlsched

        return {"batch": self.batch, "mode": self.graph.mode, "device": None if self.trace else self.device,
                "threads": self.threads, "dlsched_version": dlsched.__version__}

    def to_dict(self) -> dict:
        """The report: model, source of the times, :meth:`OracleResult.summary`, fused ops, link, trace
        coverage, the batch and threads, and how much the runs varied."""
        g = self.graph
        info = {"model": g.name, "mode": g.mode, "device": self.device, "runs": self.runs, "batch": self.batch,
                "batch_picked": self.batch_picked, "threads": self.threads, **self.result.summary(g),
                "fused": self.fused, "network": self.network, "default_time": self.default_time,
                "run_spread": run_spread(self.result.frame), "noisy": noisy_ops(self.result.frame)}
        if self.trace is not None:
            info["trace"] = self.trace
        return info


def build_oracle(graph: Graph, *, spec: DeviceSpec | None = None, trace: str | None = None, model: str | None = None,
                 device: str = "cpu", runs: int = 5, warmup: int = 1, bandwidth: float | None = None,
                 latency: float | None = None, measure: Callable[[], Any] | None = None,
                 default_time: float | None = None, progress: Callable[[str], Any] | None = None,
                 threads: int = 1, min_coverage: float | None = None) -> BuiltOracle:
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
    threads : int
        Intra-op threads of the framework profiler running ``model``.
    min_coverage : float, optional
        With ``trace``: refuse it when its ops match less than this share of its compute time
        (:func:`~dlsched.profiling.trace_import.import_trace`).

    Returns
    -------
    BuiltOracle

    Warns
    -----
    DlschedWarning
        The profiler chose the batch of a symbolic batch dimension, or some
        ops' times varied between runs (:func:`noisy_ops`).

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

        imported = import_trace(trace, graph, min_coverage=min_coverage)
        compute, untimed, coverage = imported.frame, imported.untimed, imported.coverage
    network = _link(spec, bandwidth, latency, measure)
    if spec is not None:
        from .analytic import analytic_oracle

        compute, untimed = analytic_oracle(graph, spec, transfers=False)
    elif model is not None:
        profile = _profiler(model)
        with progress(f"profiling {graph.name} on {device}") if progress else contextlib.nullcontext() as bar:
            compute, untimed = profile(model, graph, device=device, runs=runs, warmup=warmup, progress=bar,
                                       threads=threads)
    # The transfers of an analytic estimate are part of it, even on a link given by flags or measured.
    result = assemble_oracle(graph, compute, untimed, network["bandwidth"], network["latency"], default_time,
                             transfer_source="analytic" if spec is not None else "network-model")
    names = set(result.frame["op"])
    fused = {k: v for k, v in compute.attrs.get("fused", {}).items() if k in names}
    built = BuiltOracle(graph, result, device=f"analytic:{spec.name}" if spec is not None else device,
                        runs=runs if model is not None else None, network=network, fused=fused,
                        trace=None if coverage is None else {"file": str(trace), **coverage},
                        default_time=default_time, batch=compute.attrs.get("batch") or _batch(graph, spec),
                        batch_picked=bool(compute.attrs.get("batch_picked")),
                        threads=threads if model is not None else None)
    _warn_about(built)
    return built


def _batch(graph: Graph, spec: DeviceSpec | None) -> int | None:
    """The batch the times describe: an estimate's is its shapes'; a trace's is only known from ``--batch``."""
    from dlsched.profiling.oracle_times import model_batch

    return model_batch(graph)[0] if spec is not None else graph.source.get("batch")


def _warn_about(built: BuiltOracle) -> None:
    """Say which batch the profiler chose for a symbolic one, and name the ops whose times varied."""
    g = built.graph
    if built.batch_picked:
        warnings.warn(DlschedWarning(
            f"{g.name}'s batch dimension is symbolic, so it was profiled at batch {built.batch} (its other "
            f"symbolic dimensions too); the oracle records it. Pass --batch N to profile at batch N."))
    noisy = noisy_ops(built.result.frame)
    if noisy:
        names = ", ".join(f"{r['op']} (min {r['time'] * 1e3:.3g} ms, median {r['median'] * 1e3:.3g} ms)"
                          for r in noisy[:5])
        warnings.warn(DlschedWarning(
            f"the times of {len(noisy)} op(s) varied between runs: their median is more than {1 + NOISE_SPREAD:g} × "
            f"their minimum, e.g. {names}; the machine was probably busy. The minimum is kept, but the oracle may "
            "not be reproducible: profile again on a quieter machine"
            + (f", with fewer --threads than {built.threads}" if (built.threads or 1) > 1 else "")
            + ", or with more --runs."))


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
    """``model``'s format (:func:`dlsched.importers.loader.detect_format`) when a framework profiler can run it.

    Raises
    ------
    DlschedError
        A ``.dag.json``: it holds no runnable model.

    Examples
    --------
    >>> runnable_format("examples/torch_models.py:small_cnn")
    'torch'
    """
    from dlsched.importers.loader import detect_format

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
