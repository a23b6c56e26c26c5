"""Many ranks' traces side by side: steps aligned, collectives matched, who arrived last, the straggler share.

A data-parallel step ends for everyone when the slowest rank has joined the
step's collectives: one slow rank costs every rank its delay. This module reads
that off one trace per rank (:class:`~dlsched.formats.kineto_trace.KinetoTrace`
objects; reading a folder of them is
:func:`dlsched.formats.kineto_trace.read_kineto_dir`'s job).

- **Ranks** come from each trace's ``distributedInfo.rank``; where it is
  missing, from a file name such as ``rank3.json`` or ``rank-3.pt.trace.json``
  (with a :class:`~dlsched.errors.DlschedWarning`). Two traces claiming one rank,
  or traces of jobs of different sizes, are refused.
- **Steps** are aligned by ``ProfilerStep#N``: only steps every rank recorded
  are compared; the others are listed per rank in ``dropped`` (and warned of).
- **Collectives** (:func:`~.trace_collectives.collectives`) are matched across
  ranks by step, process group, name, size (the input's elements; not for
  all-to-all, whose splits differ by rank) and launch order among those. A
  collective is expected on the ranks of its group that were given; one missing
  on some of them is listed in ``unmatched`` (with a warning), never paired with
  another. When some trace names no process group (its header is missing and
  its records name none, as gloo's do), groups are left out of the match.
- **Arrival** at a collective is its host launch (and, on GPU traces, its
  kernel's start as well). The skew is the last arrival minus the first, and the
  last rank is the one that kept the others waiting.
- **Clocks.** Ranks on different hosts have unrelated clocks, so by default
  (``clock="step"``) each rank's times are taken from the start of its own
  ``ProfilerStep``. A DDP step starts right after the previous step's
  collectives ended, at about the same moment on every rank, so this needs no
  clock offset at all; its error is the spread of the ranks' step starts
  (their optimizer steps and the profiler's own work). ``clock="shared"`` uses
  the timestamps as they are, exact for ranks on one host.
- **Straggler share** (DESIGN §4.6, ``(max_i m_i − min_i m_i) / max_i m_i``).
  A rank's busy time ``m_i`` in a step is its work before it joined the step's
  last collective: the host launch of that collective minus the rank's step
  start (the whole step when the step has no matched collective). What comes
  after is the wait for the others and the collective itself, which every rank
  shares. The step's straggler is the rank with the longest ``m_i``; how often
  each rank arrived last at the step's collectives is reported beside it. On a
  GPU trace the host runs ahead of the device, so ``m_i`` is the host's side of
  the step; the device's arrivals are in the per-collective table.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from dlsched.errors import DlschedError, DlschedWarning
from dlsched.formats.kineto_trace import KinetoTrace, TraceError
from dlsched.profiling.kineto_events import steps as profiler_steps

from .trace_collectives import collectives

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
CLOCKS = ("step", "shared")
# Collectives whose size differs by rank by design: matched without it.
_UNEVEN = frozenset({"all_to_all", "gather", "scatter", "send", "recv", "sendrecv", "unknown"})


@dataclass
class RankReport:
    """What :func:`rank_report` found.

    Attributes
    ----------
    ranks : list of int
    steps : list of int
        The ``ProfilerStep`` numbers every rank recorded, compared.
    dropped : dict
        Rank → the steps it recorded that not every rank did.
    clock : str
        ``"step"`` or ``"shared"`` (module docstring).
    step_times : pandas.DataFrame
        One row per rank and step: ``rank``, ``step``, ``start``, ``end``, ``dur`` (the
        ``ProfilerStep`` span, µs), ``busy`` (``m_i``), ``collectives`` (matched in the step).
    matches : pandas.DataFrame
        One row per collective matched across ranks: ``step``, ``seq`` (launch order in the step),
        ``name``, ``group``, ``elements`` (rank-wise minimum), ``dtype``, ``ranks`` (how many),
        ``first_rank``, ``last_rank``, ``skew`` (µs, host launch), ``last_rank_device``,
        ``skew_device`` (kernel start; −1 and NaN on CPU traces).
    arrivals : pandas.DataFrame
        One row per rank and match: ``match`` (index into ``matches``), ``rank``, ``arrival``,
        ``arrival_device`` (µs on the chosen clock).
    stragglers : pandas.DataFrame
        One row per step: ``step``, ``step_time`` (longest rank's ``ProfilerStep``), ``busy_min``,
        ``busy_max``, ``share``, ``straggler``, ``most_last`` (the rank that arrived last most
        often), ``last_arrivals`` (rank → count).
    unmatched : pandas.DataFrame
        Collectives of the compared steps found on some ranks of their group only: ``rank`` and
        the collective's ``step``, ``name``, ``elements``, ``group``, ``seq``.
    """

    ranks: list[int]
    steps: list[int]
    dropped: dict[int, list[int]]
    clock: str
    step_times: pd.DataFrame
    matches: pd.DataFrame
    arrivals: pd.DataFrame
    stragglers: pd.DataFrame
    unmatched: pd.DataFrame = field(default_factory=pd.DataFrame)


def rank_of(trace: KinetoTrace) -> int:
    """The rank a trace belongs to: ``distributedInfo.rank``, else its file name (with a warning).

    Raises
    ------
    TraceError
        Neither says.

    Examples
    --------
    >>> import pandas as pd, warnings
    >>> t = KinetoTrace(path=Path("out/rank-3.pt.trace.json"), events=pd.DataFrame())
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     r = rank_of(t)
    >>> r, "file name" in str(w[0].message)
    (3, True)
    """
    if trace.rank is not None:
        return trace.rank
    m = _RANK_IN_NAME.search(Path(trace.path).name)
    if m is None:
        raise TraceError(f"{trace.path}: the trace does not say which rank recorded it (no distributedInfo.rank) "
                         "and its file name holds no 'rankN'; initialise torch.distributed before starting the "
                         "profiler, or name each rank's file rank0.json, rank1.json, …")
    warnings.warn(DlschedWarning(f"{trace.path}: no distributedInfo.rank in the trace; rank {m.group(1)} taken "
                                 "from the file name"), stacklevel=2)
    return int(m.group(1))


def assign_ranks(traces: Sequence[KinetoTrace]) -> dict[int, KinetoTrace]:
    """Rank → trace, every trace's rank told (:func:`rank_of`), each rank once, one job's traces only.

    Raises
    ------
    TraceError
        No traces, a trace whose rank is unknown, two traces of one rank, ranks outside the job's
        world size, or traces of jobs of different sizes.
    """
    if not traces:
        raise TraceError("no traces given: pass one trace file per rank")
    out: dict[int, KinetoTrace] = {}
    for t in traces:
        r = rank_of(t)
        if r in out:
            raise TraceError(f"{out[r].path} and {t.path} both claim rank {r}: pass one trace per rank (two runs' "
                             "traces in one folder?)")
        out[r] = t
    worlds = {t.world_size for t in out.values() if t.world_size is not None}
    if len(worlds) > 1:
        sizes = ", ".join(f"{t.path.name}: {t.world_size}" for t in out.values() if t.world_size is not None)
        raise TraceError(f"the traces come from jobs of different sizes ({sizes}); pass the traces of one job")
    if worlds:
        world = worlds.pop()
        beyond = sorted(r for r in out if r >= world)
        if beyond:
            raise TraceError(f"{out[beyond[0]].path}: rank {beyond[0]} is outside the job's world size {world}")
    return dict(sorted(out.items()))


def rank_report(traces: Sequence[KinetoTrace], clock: str = "step",
                found: Mapping[int, pd.DataFrame] | None = None) -> RankReport:
    """Align ranks by step, match their collectives, and find each step's straggler (module docstring).

    Parameters
    ----------
    traces : sequence of KinetoTrace
        One per rank, in any order.
    clock : str
        ``"step"`` (each rank's times from its own step start; the default, right across hosts) or
        ``"shared"`` (timestamps as recorded; ranks on one host).
    found : mapping, optional
        Rank → ``collectives(trace)``, when the caller has them already.

    Returns
    -------
    RankReport

    Raises
    ------
    TraceError
        The ranks cannot be told apart (:func:`assign_ranks`), a rank recorded no
        ``ProfilerStep``, or no step was recorded by every rank.
    DlschedError
        An unknown ``clock``.
    """
    if clock not in CLOCKS:
        raise DlschedError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    by_rank = assign_ranks(traces)
    ranks = list(by_rank)
    spans = {}
    for r, t in by_rank.items():
        st = profiler_steps(t.events)
        if st.empty:
            raise TraceError(f"{t.path}: rank {r}'s trace holds no ProfilerStep#N; record with "
                             "torch.profiler.profile(schedule=...) and call prof.step() once per iteration")
        spans[r] = st.set_index("step")
    common = sorted(set.intersection(*(set(s.index) for s in spans.values())))
    dropped = {r: sorted(set(s.index) - set(common)) for r, s in spans.items()}
    dropped = {r: d for r, d in dropped.items() if d}
    if not common:
        have = "; ".join(f"rank {r}: {_span(list(s.index))}" for r, s in spans.items())
        raise TraceError(f"no ProfilerStep was recorded by every rank ({have}); profile the same steps on every "
                         "rank (one schedule for all)")
    if dropped:
        warnings.warn(DlschedWarning("steps not recorded by every rank are left out: " + "; ".join(
            f"rank {r}: {_span(d)}" for r, d in dropped.items())), stacklevel=2)

    colls = []
    for r, t in by_rank.items():
        c = collectives(t) if found is None else found[r]
        c = c[c["step"].isin(common)].copy()
        c["rank"] = r
        start = c["step"].map(spans[r]["ts"])
        base = start if clock == "step" else 0.0
        c["arrival"] = c["launch_ts"] - base
        c["arrival_device"] = np.where(c["kernels"] > 0, c["start"] - base, np.nan)
        c["from_step"] = c["launch_ts"] - start
        colls.append(c)
    allc = pd.concat(colls, ignore_index=True)
    allc["size_key"] = np.where(allc["name"].isin(_UNEVEN), -1, allc["elements"])
    # a trace without its header names no group (gloo's records do not): then groups cannot key the match
    allc["group_key"] = allc["group"] if (allc["group"] != "").all() else ""
    key = ["step", "group_key", "name", "size_key"]
    allc["nth"] = allc.sort_values("launch_ts", kind="stable").groupby(key + ["rank"]).cumcount()
    present = set(ranks)
    matches, arrivals, unmatched = [], [], []
    for k, g in allc.groupby(key + ["nth"], sort=False):
        expected = present.intersection(g["group_ranks"].iloc[0]) if isinstance(g["group_ranks"].iloc[0], list) \
            else present
        have = set(g["rank"])
        if have != expected:
            unmatched.append(g)
            continue
        g = g.sort_values("rank")
        arr = g["arrival"].to_numpy(float)
        dev = g["arrival_device"].to_numpy(float)
        rk = g["rank"].to_numpy()
        i_last, i_first = _argmax(arr), _argmin(arr)
        has_dev = not np.isnan(dev).any()
        j = len(matches)
        matches.append({"step": k[0], "group": g["group"].max(), "name": k[2], "elements": int(g["elements"].min()),
                        "dtype": g["dtype"].iloc[0], "ranks": len(g), "first_rank": int(rk[i_first]),
                        "last_rank": int(rk[i_last]), "skew": float(arr[i_last] - arr[i_first]),
                        "last_rank_device": int(rk[_argmax(dev)]) if has_dev else -1,
                        "skew_device": float(dev.max() - dev.min()) if has_dev else float("nan"),
                        "_order": float(g["from_step"].mean())})
        arrivals.append(pd.DataFrame({"match": j, "rank": rk, "arrival": arr, "arrival_device": dev,
                                      "from_step": g["from_step"].to_numpy(float)}))
    mcols = ["step", "seq", "name", "group", "elements", "dtype", "ranks", "first_rank", "last_rank", "skew",
             "last_rank_device", "skew_device"]
    m = pd.DataFrame(matches, columns=[c for c in mcols if c != "seq"] + ["_order"])
    arr = pd.concat(arrivals, ignore_index=True) if arrivals else pd.DataFrame(
        columns=["match", "rank", "arrival", "arrival_device", "from_step"])
    # launch order within the step, renumbered so that matches and arrivals agree
    order = m.sort_values(["step", "_order"], kind="stable").index.to_numpy()
    renum = np.empty(len(m), dtype=np.int64)
    renum[order] = np.arange(len(m))
    m = m.loc[order].reset_index(drop=True)
    m.insert(1, "seq", m.groupby("step").cumcount().astype(np.int64))
    m = m[mcols]
    arr["match"] = renum[arr["match"].to_numpy(np.int64)] if len(arr) else arr["match"]
    arr = arr.sort_values(["match", "rank"], kind="stable").reset_index(drop=True)

    if unmatched:
        n = sum(len(g) for g in unmatched)
        warnings.warn(DlschedWarning(
            f"{n} collectives of the compared steps were not found on every rank of their group (another "
            "launch order, size or group on some ranks); they are listed as unmatched and left out of the "
            "arrivals and the straggler share"), stacklevel=2)
    step_times = _step_times(ranks, common, spans, m, arr)
    strag = _stragglers(common, step_times, m)
    um = pd.concat(unmatched, ignore_index=True)[["rank", "step", "seq", "name", "elements", "group"]] \
        if unmatched else pd.DataFrame(columns=["rank", "step", "seq", "name", "elements", "group"])
    return RankReport(ranks=ranks, steps=common, dropped=dropped, clock=clock, step_times=step_times, matches=m,
                      arrivals=arr[["match", "rank", "arrival", "arrival_device"]], stragglers=strag,
                      unmatched=um.sort_values(["step", "rank", "seq"]).reset_index(drop=True))


def _step_times(ranks, common, spans, m, arr) -> pd.DataFrame:
    rows = []
    step_of = m["step"].to_numpy() if len(m) else np.array([], dtype=np.int64)
    for r in ranks:
        mine = arr[arr["rank"] == r]
        for s in common:
            sp = spans[r].loc[s]
            ids = np.flatnonzero(step_of == s)
            own = mine[mine["match"].isin(ids)]
            busy = float(own["from_step"].max()) if len(own) else float(sp["dur"])
            rows.append({"rank": r, "step": s, "start": float(sp["ts"]), "end": float(sp["end"]),
                         "dur": float(sp["dur"]), "busy": busy, "collectives": len(own)})
    return pd.DataFrame(rows, columns=["rank", "step", "start", "end", "dur", "busy", "collectives"])


def _stragglers(common, st: pd.DataFrame, m: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for s in common:
        g = st[st["step"] == s].sort_values("rank")
        busy = g["busy"].to_numpy(float)
        rk = g["rank"].to_numpy()
        last = m.loc[m["step"] == s, "last_rank"].value_counts()
        counts = {int(r): int(last.get(r, 0)) for r in rk}
        hi = float(busy.max())
        rows.append({"step": s, "step_time": float(g["dur"].max()), "busy_min": float(busy.min()), "busy_max": hi,
                     "share": (hi - float(busy.min())) / hi if hi > 0 else 0.0,
                     "straggler": int(rk[_argmax(busy)]),
                     "most_last": max(counts, key=lambda r: (counts[r], -r)) if len(last) else -1,
                     "last_arrivals": counts})
    return pd.DataFrame(rows, columns=["step", "step_time", "busy_min", "busy_max", "share", "straggler",
                                       "most_last", "last_arrivals"])


def _argmax(a: np.ndarray) -> int:
    """Index of the largest value, the first on ties (the lowest rank)."""
    return int(np.argmax(a))


def _argmin(a: np.ndarray) -> int:
    return int(np.argmin(a))


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}–{steps[-1]} ({len(steps)} steps)" if len(steps) > 3 else ", ".join(map(str, steps))
