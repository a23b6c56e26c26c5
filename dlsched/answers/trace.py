"""The ``trace`` answer: a job's ``torch.profiler`` traces, one per rank, read once and analysed.

:class:`TraceAnalysis` is shaped like Holistic Trace Analysis's facade: the
files are parsed once (:func:`~dlsched.formats.kineto_trace.read_kineto`), and
each analysis is one method over them, each a pure function of
``dlsched/analyses/``:

- :meth:`~TraceAnalysis.breakdown`: per rank and step, compute, communication,
  exposed communication, overlap, memory and idle (``trace_breakdown``);
- :meth:`~TraceAnalysis.hta`: the same over the whole trace with Holistic Trace
  Analysis's definitions, to compare with that tool;
- :meth:`~TraceAnalysis.collectives`: every collective per rank and step, and
  DDP's buckets (``trace_collectives``);
- :meth:`~TraceAnalysis.ranks`: steps aligned across ranks, who arrived last at
  each collective, and each step's straggler (``trace_ranks``);
- :meth:`~TraceAnalysis.bounds`: TicTac's U, L and E per rank and step
  (``trace_bounds``);
- :meth:`~TraceAnalysis.replay`: the step rebuilt as a DAG and replayed, against
  its measured time (``trace_replay``);
- :meth:`~TraceAnalysis.fsdp`: an FSDP2 job's units and the order of their
  all-gathers and reduce-scatters (``trace_fsdp``).

:func:`trace` runs them all and returns one JSON-able :class:`TraceReport`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence

import pandas as pd

from dlsched.formats.kineto_trace import KinetoTrace, TraceError, read_kineto, read_kineto_dir


@dataclass(frozen=True)
class TraceOptions:
    """How :func:`trace` reads and compares the ranks.

    Attributes
    ----------
    clock : str
        ``"step"``: each rank's times from its own step start (ranks on several hosts); ``"shared"``: the
        timestamps as recorded (ranks on one host).
    replay : bool
        Rebuild and replay every step (the slowest analysis).
    """

    clock: str = "step"
    replay: bool = True


class TraceAnalysis:
    """One job's traces, parsed once; one method per analysis (module docstring).

    Parameters
    ----------
    paths : sequence of str or Path
        Trace files, or one folder holding one trace file per rank.
    """

    def __init__(self, paths: Sequence[str | Path]):
        paths = [Path(p) for p in paths]
        if not paths:
            raise TraceError("no trace given: give one trace file per rank, or the folder that holds them")
        if len(paths) == 1 and paths[0].is_dir():
            self.traces = read_kineto_dir(paths[0])
        else:
            self.traces = [read_kineto(p) for p in paths]
        from dlsched.analyses.trace_ranks import assign_ranks

        self.by_rank: dict[int, KinetoTrace] = assign_ranks(self.traces)

    @cached_property
    def has_steps(self) -> bool:
        from dlsched.profiling.kineto_events import steps

        return all(not steps(t.events).empty for t in self.by_rank.values())

    def breakdown(self) -> pd.DataFrame:
        """Per rank and step: the time breakdown (µs), one row each."""
        from dlsched.analyses.trace_breakdown import breakdown

        frames = []
        for r, t in self.by_rank.items():
            b = breakdown(t)
            steps = b.steps
            if steps.empty:  # no ProfilerStep: the whole trace is the one row, as bounds and replay rate it
                steps = pd.DataFrame([{"step": None, "ts": float(t.events["ts"].min()),
                                       "end": float(t.events["end"].max()), **b.whole}])
            frames.append(steps.assign(rank=r, mode=b.mode))
        return pd.concat(frames, ignore_index=True)

    def hta(self) -> pd.DataFrame:
        """Per rank, over the whole trace, Holistic Trace Analysis's figures (its definitions)."""
        from dlsched.analyses.trace_breakdown import hta_breakdown, hta_overlap
        from dlsched.profiling.kineto_events import DEVICE_CATS

        rows = []
        for r, t in self.by_rank.items():
            if t.events["cat"].isin(DEVICE_CATS).any():  # HTA's figures are of GPU kernels; undefined on a CPU trace
                rows.append({"rank": r, **hta_breakdown(t), "comp_comm_overlap_pctg": hta_overlap(t)})
        return pd.DataFrame(rows)

    @cached_property
    def _collectives(self) -> dict[int, pd.DataFrame]:
        """Each rank's collectives, found once: the buckets and the cross-rank matching read them too."""
        from dlsched.analyses.trace_collectives import collectives

        return {r: collectives(t) for r, t in self.by_rank.items()}

    def collectives(self) -> pd.DataFrame:
        """Every collective of every rank, per step in launch order."""
        return pd.concat([c.assign(rank=r) for r, c in self._collectives.items()], ignore_index=True)

    def buckets(self) -> pd.DataFrame:
        """DDP's all-reduce buckets per rank and step."""
        from dlsched.analyses.trace_collectives import ddp_buckets

        return pd.concat([ddp_buckets(t, self._collectives[r]).assign(rank=r) for r, t in self.by_rank.items()],
                         ignore_index=True)

    def fsdp(self) -> pd.DataFrame:
        """Each FSDP2 all-gather and reduce-scatter per rank and step, with its unit and phase."""
        from dlsched.analyses.trace_fsdp import fsdp_collectives

        return pd.concat([fsdp_collectives(t, self._collectives[r]).assign(rank=r)
                          for r, t in self.by_rank.items()], ignore_index=True)

    def ranks(self, clock: str = "step"):
        """Steps aligned across ranks, collectives matched, stragglers (a ``RankReport``)."""
        from dlsched.analyses.trace_ranks import rank_report

        return rank_report(list(self.by_rank.values()), clock=clock, found=self._collectives)

    def bounds(self) -> pd.DataFrame:
        """TicTac's U, L and E per rank and step (seconds)."""
        from dlsched.analyses.trace_bounds import trace_bounds

        rows = [b.to_dict() | {"rank": r} for r, t in self.by_rank.items() for b in trace_bounds(t)]
        return pd.DataFrame(rows)

    def replay(self) -> pd.DataFrame:
        """Each step replayed: predicted against measured step time (seconds)."""
        from dlsched.analyses.trace_replay import replay_trace

        rows = [x.to_dict() | {"rank": r} for r, t in self.by_rank.items() for x in replay_trace(t)]
        return pd.DataFrame(rows)


@dataclass
class TraceReport:
    """What :func:`trace` answers: the tables behind the views, and :meth:`to_dict` for ``--json``."""

    files: dict
    breakdown: pd.DataFrame
    hta: pd.DataFrame
    collectives: pd.DataFrame
    buckets: pd.DataFrame
    bounds: pd.DataFrame
    replay: pd.DataFrame | None = None
    ranks: object = None
    notes: list = field(default_factory=list)
    fsdp: pd.DataFrame | None = None
    fsdp_units: pd.DataFrame | None = None

    def to_dict(self) -> dict:
        """The JSON object of ``--json`` (numpy scalars and NaN are turned into JSON by the CLI's ``emit_json``)."""
        def rows(df):
            return None if df is None else df.to_dict(orient="records")

        out = {"files": self.files, "notes": self.notes, "per_step": rows(self.breakdown), "hta": rows(self.hta),
               "bounds": rows(self.bounds), "replay": rows(self.replay),
               "collectives": rows(self.collectives.drop(columns=["group_ranks"], errors="ignore")),
               "buckets": rows(self.buckets), "fsdp": rows(self.fsdp), "fsdp_units": rows(self.fsdp_units)}
        if self.ranks is not None:
            out.update(steps=self.ranks.steps, dropped=self.ranks.dropped, clock=self.ranks.clock,
                       stragglers=rows(self.ranks.stragglers), matches=rows(self.ranks.matches))
        return out


def trace(paths: Sequence[str | Path], options: TraceOptions = TraceOptions()) -> TraceReport:
    """Read a job's traces once and run every analysis (module docstring).

    Raises
    ------
    TraceError
        A file is not a readable trace, or the ranks cannot be told apart.
    """
    ta = TraceAnalysis(paths)
    notes = []
    ranks = None
    if ta.has_steps:
        ranks = ta.ranks(options.clock)
    else:
        notes.append("no ProfilerStep#N in every trace: figures are over the whole trace; record with "
                     "torch.profiler's schedule and prof.step() for per-step figures and cross-rank matching")
    files = {str(r): str(t.path) for r, t in ta.by_rank.items()}
    bounds = ta.bounds()
    notes += filter(None, [_host_bound(bounds)])
    fsdp = ta.fsdp()
    return TraceReport(files=files, breakdown=ta.breakdown(), hta=ta.hta(), collectives=ta.collectives(),
                       buckets=ta.buckets(), bounds=bounds, replay=ta.replay() if options.replay else None,
                       ranks=ranks, notes=notes, fsdp=fsdp, fsdp_units=_first_rank_units(fsdp))


def _first_rank_units(fsdp: pd.DataFrame) -> pd.DataFrame | None:
    """The FSDP2 units of the lowest rank (every rank has the same), with ``rank``; ``None`` for no FSDP2."""
    from dlsched.analyses.trace_fsdp import fsdp_units

    if fsdp.empty:
        return None
    rank = fsdp["rank"].min()
    return fsdp_units(fsdp[fsdp["rank"] == rank]).assign(rank=rank)


def _host_bound(bounds: pd.DataFrame) -> str | None:
    """A note when device steps lie above U: the GPU idled between the step's own kernels, waiting for launches.

    No order of the compute and collective streams explains such a step (a ResNet-50 DDP step on an H200 ran
    17 ms of kernels in a 54 ms device makespan), so its E is withheld; this says why in the user's terms.
    """
    if bounds.empty or "model_error" not in bounds:
        return None
    dev = bounds[bounds["resources"] == "device"]
    late = dev[dev["model_error"] > 0]
    if late.empty:
        return None
    share = (late["idle"] / late["makespan"]).median()
    return (f"host-bound: in {len(late)} of {len(dev)} device steps the GPU idled between the step's own kernels "
            f"longer than any overlap explains (median {share:.0%} of the device makespan, "
            f"{late['idle'].median() * 1e3:,.1f} ms): nothing was queued, as the host was still launching work, "
            f"loading data or waiting on a synchronising call (.item(), a CPU collective). Those steps have no E: "
            f"the order of compute and collectives is not what sets their time. The host's work per step does: "
            f"larger kernels (a larger batch), CUDA graphs or torch.compile shorten launching, and the "
            f"profiler's own cost (record_shapes, with_stack) adds to it")
