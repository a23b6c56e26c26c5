"""Assemble a time oracle: compute rows + transfer rows, and what could not be timed (DESIGN §3).

A profiler (or a trace import) gives one row per compute op it timed and a
``{op: reason}`` dict for the ones it could not; this module adds a row per
recv/send from the network model, fills untimed ops with ``--default-time``
when given (``source = "default"``), and reports what is missing.

Policy for untimed ops: the oracle is still written without them (it is
useful as it stands), the command warns and exits 0, and analyses refuse the
partial oracle until they are given ``--default-time``
(:func:`dlsched.exporters.oracle_file.oracle_times`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from dlsched.dag import Graph

from .network import transfer_rows
from .schema import oracle_frame, oracle_row



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
        return self.frame[~self.frame["source"].isin(["network-model"])]

    def summary(self, graph: Graph, top: int = 10) -> dict:
        """Figures for the closing table and ``--json``."""
        df = self.frame
        is_xfer = df["source"] == "network-model"
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
                    bandwidth: float, latency: float, default_time: float | None = None) -> OracleResult:
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
    xfer = transfer_rows(graph, bandwidth, latency)
    order = {op.name: op.index for op in graph.ops()}
    comp_df = oracle_frame(rows.values())
    frame = pd.concat([comp_df, xfer], ignore_index=True) if len(xfer) else comp_df
    if "bytes" in frame:
        frame["bytes"] = frame["bytes"].fillna(0).astype("int64")
    frame = frame.iloc[sorted(range(len(frame)), key=lambda i: order[frame["op"].iat[i]])].reset_index(drop=True)
    frame["runs"] = frame["runs"].astype("int64")
    return OracleResult(frame=frame, untimed=untimed, defaulted=defaulted, extra=extra,
                        bandwidth=float(bandwidth), latency=float(latency))
