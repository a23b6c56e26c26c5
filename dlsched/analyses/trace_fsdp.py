"""FSDP2's units and the order of their collectives, read from one rank's trace (DESIGN §4.10).

``fully_shard`` names its work per unit in record functions: ``FSDP::all_gather (layers.0)`` around the
all-gather of that unit's parameters, ``FSDP::post_backward_reduce (layers.0)`` around its reduce-scatter,
``FSDP::pre_forward (layers.0)`` and ``FSDP::pre_backward (layers.0)`` around what runs before its forward
and backward, ``FSDP::backward_prefetch for layers.0`` (and ``forward_prefetch``) around an all-gather
issued early, for that unit. The root unit's records carry no name (``FSDP::all_gather``).

Each collective of the step (:func:`~dlsched.analyses.trace_collectives.collectives`, which already links a
record to gloo's or NCCL's execution of it) takes the unit of the innermost ``all_gather`` or
``post_backward_reduce`` record holding its launch on the issuing thread. Its phase is ``backward`` when a
``pre_backward``, ``post_backward`` or ``backward_prefetch`` record also holds it, else ``forward``; it is
``prefetched`` when a ``*_prefetch`` record holds it. So the trace gives what a plan sets
(:mod:`dlsched.planning.fsdp_plan`): the units, the order their all-gathers were issued in, which were
prefetched, and what each moved and how long it took; the step's E and replay come from the same trace
(:mod:`.trace_bounds`, :mod:`.trace_replay`).

Examples
--------
>>> unit_of("FSDP::all_gather (layers.0)"), unit_of("FSDP::all_gather"), unit_of("aten::mm")
('layers.0', '', None)
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from dlsched.formats.kineto_trace import KinetoTrace

COLUMNS = ["step", "seq", "kind", "unit", "phase", "prefetched", "elements", "launch_ts", "start", "end"]
ROOT = "(root)"  # how the root unit, whose records carry no name, is shown

_RECORD = re.compile(r"^FSDP::(?P<what>[a-z_]+?)(?: \((?P<unit>[^)]*)\)| for (?P<for>.+))?$")
_KINDS = {"all_gather": "all_gather", "post_backward_reduce": "reduce_scatter"}
_COLLECTIVE = {"all_gather": "allgather", "reduce_scatter": "reduce_scatter"}


def unit_of(name: str) -> str | None:
    """The unit an ``FSDP::`` record names (``''`` for the root), or ``None`` for any other event."""
    m = _RECORD.match(name)
    return None if m is None else (m["unit"] or m["for"] or "")


def fsdp_collectives(trace: KinetoTrace, colls: pd.DataFrame) -> pd.DataFrame:
    """Each FSDP2 all-gather and reduce-scatter of ``trace``, with its unit and phase (module docstring).

    Parameters
    ----------
    trace : KinetoTrace
    colls : pandas.DataFrame
        The trace's :func:`~dlsched.analyses.trace_collectives.collectives`.

    Returns
    -------
    pandas.DataFrame
        :data:`COLUMNS`, in launch order per step: ``kind`` (``all_gather`` or ``reduce_scatter``),
        ``unit`` (:data:`ROOT` for the root), ``phase`` (``forward``/``backward``), ``prefetched``,
        ``elements`` (the unsharded unit's: the all-gather's output, the reduce-scatter's input),
        ``launch_ts``, ``start``, ``end`` (µs, as in ``colls``). Empty when the trace has no ``FSDP::`` record.
    """
    ev = trace.events
    rec = ev[ev["name"].str.startswith("FSDP::")]
    if rec.empty or colls.empty:
        return pd.DataFrame(columns=COLUMNS)
    parsed = rec["name"].str.extract(_RECORD)
    rec = rec.assign(what=parsed["what"], unit=parsed["unit"].fillna(parsed["for"]).fillna(""))
    by_thread = {k: g.sort_values("ts") for k, g in rec.groupby(["pid", "tid"])}
    rows = []
    for c in colls.itertuples(index=False):
        g = by_thread.get((c.pid, c.tid))
        if g is None:
            continue
        holds = g[(g["ts"].to_numpy() <= c.launch_ts) & (g["end"].to_numpy() >= c.launch_ts)]
        own = holds[holds["what"].isin(list(_KINDS))]
        if own.empty:
            continue
        inner = own.iloc[-1]  # sorted by start: the last one holding the launch is the innermost
        kind = _KINDS[inner["what"]]
        if c.name != _COLLECTIVE[kind]:
            continue
        whats = set(holds["what"])
        backward = any(w.startswith(("pre_backward", "post_backward", "backward_prefetch", "root_post_backward"))
                       for w in whats)
        elements = c.out_elements if kind == "all_gather" else c.elements
        if elements < 0 and kind == "all_gather" and c.group_size > 0:
            elements = c.elements * c.group_size
        rows.append({"step": c.step, "kind": kind, "unit": inner["unit"] or ROOT,
                     "phase": "backward" if backward else "forward",
                     "prefetched": any(w.endswith("_prefetch") for w in whats), "elements": int(elements),
                     "launch_ts": c.launch_ts, "start": c.start, "end": c.end})
    df = pd.DataFrame(rows, columns=[k for k in COLUMNS if k != "seq"])
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    df = df.sort_values(["step", "launch_ts"], kind="stable").reset_index(drop=True)
    df.insert(1, "seq", df.groupby("step").cumcount().astype(np.int64))
    return df[COLUMNS]


def fsdp_units(found: pd.DataFrame) -> pd.DataFrame:
    """Per unit, over the steps of ``found`` (:func:`fsdp_collectives` of one rank): ``unit``, ``elements``
    (unsharded), ``all_gathers`` per step (forward, backward), ``prefetched`` per step, and the median
    ``all_gather_us`` and ``reduce_scatter_us`` per step; in the order of the first step's first all-gathers."""
    if found.empty:
        return pd.DataFrame(columns=["unit", "elements", "forward", "backward", "prefetched", "all_gather_us",
                                     "reduce_scatter_us"])
    f = found.assign(dur=found["end"] - found["start"])
    steps = f["step"].nunique()
    rows = []
    for unit in dict.fromkeys(f.sort_values(["step", "seq"])["unit"]):
        u = f[f["unit"] == unit]
        ag, rs = u[u["kind"] == "all_gather"], u[u["kind"] == "reduce_scatter"]
        per_step = u.groupby(["step", "kind"])["dur"].sum().unstack(fill_value=0.0)
        rows.append({"unit": unit, "elements": int(ag["elements"].max() if len(ag) else rs["elements"].max()),
                     "forward": (ag["phase"] == "forward").sum() / steps,
                     "backward": (ag["phase"] == "backward").sum() / steps,
                     "prefetched": ag["prefetched"].sum() / steps,
                     "all_gather_us": float(per_step.get("all_gather", pd.Series([0.0])).median()),
                     "reduce_scatter_us": float(per_step.get("reduce_scatter", pd.Series([0.0])).median())})
    return pd.DataFrame(rows)
