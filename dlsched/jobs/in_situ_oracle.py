"""The in-situ oracle of ``dlsched validate`` (DESIGN §4.7): the times its simulations use, and where each came from.

Compute: every op of the model profiled with the cluster's intra-op threads
per process (the median of ``runs`` runs, since the cluster's iterations are
not best cases either), beside the other workers computing
(:func:`dlsched.jobs.co_runner.cluster_load`). Transfers: ``latency + bytes /
bandwidth`` from a gloo measurement of the cluster's own link
(:func:`dlsched.profiling.link.measure_link`), so gloo's per-transfer overhead
is in the fitted latency. The compute level, its slow-down beside transfers
and its step-to-step variation come from the cluster itself
(:meth:`InSituOracle.calibrate`, on the job's calibration iterations).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence

from dlsched.analyses.calibration import calibrate_compute, compute_split, crowd_factors
from dlsched.profiling.oracle import build_oracle
from dlsched.profiling.oracle_times import oracle_times

#: Profiled runs per op of the in-situ oracle. A small VM's speed drifts by several percent over seconds;
#: a profile of 5 runs (2 s) caught such phases and moved the oracle's compute by up to 15%.
ORACLE_RUNS = 15


@dataclass
class InSituOracle:
    """The times the simulation uses, and where each came from."""

    graph: object
    times: dict
    compute: float
    transfer_bytes: float
    link: dict
    threads: int
    runs: int
    factors: dict = field(default_factory=lambda: {"unordered": [[1.0]], "enforced": [[1.0]]})
    overlap: float = 1.0
    fitted: bool = False
    #: cores' worth of other load measured before the job, the cores, and what it makes of a step's ops with
    #: ``k`` workers computing at once (:func:`~dlsched.analyses.calibration.crowd_factors`)
    background: float = 0.0
    cores: float = 1.0
    crowd: list | None = None
    scale: float = 1.0
    #: link model -> ``{"unordered": (measured, predicted), "tic": (...)}``: mean times of the calibration
    #: iterations, measured and simulated with the calibrated oracle (:func:`~dlsched.analyses.validate.calibration_check`)
    check: dict = field(default_factory=dict)

    def rescale(self, scale: float) -> None:
        """Multiply every compute op's time by ``scale`` (the profile's shape, the cluster's level)."""
        for o in self.graph.compute_ops():
            self.times[o.name] *= scale
        self.compute *= scale
        self.scale *= scale

    def crowded(self, workers: int, cores: float, background: float) -> None:
        """Share ``cores`` with ``background`` cores' worth of other load (set before :meth:`calibrate`)."""
        self.cores, self.background = cores, background
        self.crowd = crowd_factors(workers, cores, background, self.threads)

    def calibrate(self, unordered: Sequence[Sequence], enforced: Sequence[Sequence]) -> None:
        """Set level, slow-down beside transfers and step factors from the calibration iterations' records
        (each a list of one iteration's workers' records; :func:`~dlsched.analyses.calibration.calibrate_compute`)."""
        groups = [*unordered, *enforced]
        fit = calibrate_compute([compute_split(r, g, self.crowd) for g in groups for r in g], self.compute)
        self.rescale(fit.level)
        self.overlap, self.fitted = fit.overlap, fit.identified
        it = iter(fit.factors)
        rows = [[next(it) for _ in g] for g in groups]
        self.factors = {"unordered": rows[:len(unordered)], "enforced": rows[len(unordered):]}

    def describe(self) -> dict:
        rows = {k: [f for row in v for f in row] for k, v in self.factors.items()}
        return {"compute": f"median of {self.runs} profiled runs per op, {self.threads} intra-op thread(s) "
                           "per process (as the cluster runs), beside the other workers computing, scaled by "
                           f"x{self.scale:.3f} to the quiet compute (link idle) the cluster's workers spent per "
                           "step in the job's unscored calibration iterations (two per round of the interleaved "
                           "orders: one unordered, one in TIC order)",
                "compute_beside_transfers": f"x{self.overlap:.3f}: " + (
                    "fitted on the same iterations, each worker's compute beside its own transfers against its "
                    "compute with the link quiet" if self.fitted else
                    "not fitted: the calibration iterations computed too little beside their transfers"),
                "compute_crowding": (f"{self.background:.2f} cores' worth of other load on {self.cores:g} cores before "
                                     "the job: with k workers computing at once an op takes x"
                                     + "/".join(f"{c:.3f}" for c in self.crowd or [1.0])
                                     + " (k = 1, 2, ...) of its time with all computing, as profiled"),
                "background_cores": self.background, "crowd": list(self.crowd or []),
                "transfers": "latency + bytes / bandwidth measured with gloo over the cluster's link (bandwidth: "
                             "transfers of 1-16 MB; latency: half a 4 KB round trip)",
                "compute_per_worker_s": self.compute, "transfer_bytes_per_worker": self.transfer_bytes,
                "bandwidth_bytes_per_s": self.link["bandwidth"], "latency_s": self.link["latency"],
                "link_peer": self.link.get("peer"),
                "compute_factors": "each worker's quiet compute per calibration iteration, over their median, "
                                   "drawn per predicted iteration as the workers' pair from one unordered "
                                   "iteration (random order) or one TIC iteration (enforced orders); unordered: "
                                   + ", ".join(f"{f:.3f}" for f in sorted(rows["unordered"]))
                                   + "; TIC: " + ", ".join(f"{f:.3f}" for f in sorted(rows["enforced"]))}


def in_situ_oracle(model: str, graph, link, threads: int, runs: int = 5) -> InSituOracle:
    """Profile ``graph``'s compute with ``threads`` intra-op threads; cost its transfers on ``link``.

    Raises
    ------
    DlschedError
        Profiling fails (see :func:`dlsched.profiling.oracle.build_oracle`).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # noisy ops are expected here: the oracle takes medians
        built = build_oracle(graph, model=model, runs=runs, warmup=1, measure=lambda: link, default_time=0.0,
                             threads=threads)
    frame = built.result.frame.copy()
    if "median" in frame.columns:
        has = frame["median"].notna() & (frame["resource"].astype(str).str.startswith("compute"))
        frame.loc[has, "time"] = frame.loc[has, "median"]
    times = oracle_times(frame, graph, default_time=0.0)
    compute = sum(times[o.name] for o in graph.compute_ops())
    nbytes = float(sum(o.bytes for o in graph.recvs()))
    return InSituOracle(graph, times, compute, nbytes, {"bandwidth": link.bandwidth, "latency": link.latency,
                                                 "peer": link.peer}, threads, runs)
