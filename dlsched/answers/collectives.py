"""The ``collectives`` answer (``dlsched simulate --collective``, ``--compare allreduce,solo,majority``, DESIGN §4.8).

Data-parallel all-reduce instead of parameter servers: a separate answer
from :mod:`dlsched.answers.simulate`, sharing only the command. The step
comes from a step time (a step of that many seconds that all-reduces
``gradient_bytes`` at its end, to replay the paper's experiments without a
model) or from a model's DAG and oracle (:mod:`dlsched.analyses.ddp_buckets`).
The network's α and β are given, or fitted to the oracle's transfers. Every
collective sees the same imbalance draw (:mod:`dlsched.analyses.imbalance`)
and is simulated by :func:`dlsched.analyses.allreduce_sim.run_collective`;
each reports its figures and, when the synchronous all-reduce is compared
too, its speedup over it.

Examples
--------
>>> r = collectives(ModelSpec(None), OracleSpec(None),
...                 Comparison(["allreduce", "solo"], processes=8, iterations=20, imbalance="random:k=1:delay=200ms"),
...                 Step(time=0.41))
>>> round(1 / r["collectives"]["allreduce"]["steps_per_s"], 4)  # e + D + ring all-reduce 14·α
0.6107
>>> r["collectives"]["solo"]["speedup"] > 1.3
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from dlsched import limits
from dlsched.analyses.allreduce_sim import ACTIVATIONS, COLLECTIVES, StepShape, run_collective
from dlsched.analyses.collective_cost import ALGORITHMS, activation_broadcast, allreduce_cost, check_network
from dlsched.analyses.ddp_buckets import DEFAULT_BUCKET_BYTES, network_from_oracle, step_shape
from dlsched.analyses.imbalance import parse_imbalance
from dlsched.errors import DlschedError

from .options import ModelSpec, OracleSpec, load_timed_model

#: The network assumed with a step time and no latency/bandwidth (profile's defaults).
DEFAULT_LATENCY_S, DEFAULT_BANDWIDTH_BPS = 50e-6, 10e9 / 8


@dataclass(frozen=True)
class Comparison:
    """Which collectives run side by side, and how.

    Attributes
    ----------
    kinds : sequence of str
        Collectives of :data:`dlsched.analyses.allreduce_sim.COLLECTIVES`.
    processes, iterations : int
        Processes, and steps each.
    imbalance : str, optional
        The injected imbalance (:func:`dlsched.analyses.imbalance.parse_imbalance`); none by default.
    activation : str
        ``free-running`` processes (training), or a ``barrier`` per iteration (micro-benchmarks).
    seed : int
        Seeds the imbalance and majority's initiators.
    sync_every : int
        The limiter: every N-th solo or majority round synchronous (0: never).
    """

    kinds: Sequence[str]
    processes: int
    iterations: int
    imbalance: str | None = None
    activation: str = "free-running"
    seed: int = 0
    sync_every: int = 0


@dataclass(frozen=True)
class Step:
    """A step without a model (``time`` seconds, ``gradient_bytes`` all-reduced at its end), or a model's buckets.

    ``phase``: of the step's ``time``, the collective phase, the wait a late
    process skips (:meth:`dlsched.analyses.allreduce_sim.StepShape.single`);
    by default the all-reduce's α–β cost comes on top of ``time``.
    """

    time: float | None = None
    gradient_bytes: int = 0
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    phase: float | None = None


@dataclass(frozen=True)
class Network:
    """The all-reduce's cost model: α (``latency``) and β (``bandwidth``, bytes/s), fitted to the oracle when
    not given (else :data:`DEFAULT_LATENCY_S`, :data:`DEFAULT_BANDWIDTH_BPS`), and the ``algorithm``;
    ``activation``: what activating a late process costs (default ``⌈log2 P⌉·α``; a real run measures its
    own, ``train-allreduce``'s ``activation_s``)."""

    latency: float | None = None
    bandwidth: float | None = None
    algorithm: str = "ring"
    activation: float | None = None


def collectives(model: ModelSpec, oracle: OracleSpec, comparison: Comparison, step: Step = Step(),
                network: Network = Network(), max_work: int | None = None, progress=None) -> dict:
    """Simulate ``comparison.kinds`` side by side and return the report.

    Keys: ``source`` (``model`` or ``step-time``), ``workers``, ``iterations``,
    ``seed``, ``imbalance``, ``activation``, ``algorithm``, ``alpha_s``,
    ``beta_Bps``, ``step_compute_s``, ``gradient_bytes``, ``buckets``,
    ``collective_phase_s`` (``None`` unless given), ``sync_every``,
    ``allreduce_s`` (one step's all-reduces), ``activation_s``, ``model`` (with a
    model), and ``collectives``: per collective the figures of
    :meth:`dlsched.analyses.allreduce_sim.CollectiveRun.figures` (``steps_per_s``,
    ``mean_iteration_s``, ``iteration_s_per_process``, ``mean_latency_s``,
    ``mean_nap``, ``nap``, ``mean_staleness``, ``max_staleness`` (the index
    lag), ``mean_version_staleness``, ``max_version_staleness`` (the model's
    age), ``missed_rate``, ``queued_at_end``, ``initiators``) plus ``speedup`` over
    the synchronous all-reduce when it is compared. ``progress(steps done,
    total)`` is called now and then, counting the steps of every collective.

    Parameters
    ----------
    model, oracle : ModelSpec, OracleSpec
        The model whose step is simulated, with its oracle; not given with ``step.time``.
    comparison : Comparison
    step : Step
    network : Network
    max_work : int, optional
        Overrides :data:`dlsched.limits.SIMULATE`.

    Raises
    ------
    DlschedError
        Neither or both of a step time and a model, an unknown collective,
        algorithm or activation model, a bad imbalance, a collective phase
        not shorter than the step, work above the budget.
    """
    kinds, processes, iterations, seed = comparison.kinds, comparison.processes, comparison.iterations, comparison.seed
    algorithm, activation, latency, bandwidth = network.algorithm, comparison.activation, network.latency, \
        network.bandwidth
    if (step.time is None) == (not model.given):
        raise DlschedError("give either a MODEL (with --oracle) or --step-time SECONDS, not both or neither")
    graph, times = load_timed_model(model, oracle) if model.given else (None, None)
    bad = [k for k in kinds if k not in COLLECTIVES]
    if bad or not kinds:
        raise DlschedError(f"unknown collective(s) {', '.join(bad) or '(none)'}; choose from {', '.join(COLLECTIVES)}")
    if algorithm not in ALGORITHMS or activation not in ACTIVATIONS:
        raise DlschedError(f"unknown algorithm {algorithm!r} or activation {activation!r}")
    imb = parse_imbalance(comparison.imbalance)
    if graph is not None:
        shape = step_shape(graph, times, step.bucket_bytes)
        if latency is None or bandwidth is None:
            fit_alpha, fit_beta = network_from_oracle(graph, times)
            latency = fit_alpha if latency is None else latency
            bandwidth = fit_beta if bandwidth is None else bandwidth
    else:
        if not step.time > 0:
            raise DlschedError(f"--step-time must be a positive number of seconds, got {step.time}")
        shape = StepShape.single(step.time, step.gradient_bytes, _phase(step))
    alpha = DEFAULT_LATENCY_S if latency is None else latency
    beta = DEFAULT_BANDWIDTH_BPS if bandwidth is None else bandwidth
    check_network(alpha, beta)
    act_s = activation_broadcast(processes, alpha) if network.activation is None else network.activation
    if not (math.isfinite(act_s) and act_s >= 0):
        raise DlschedError(f"the activation cost must be a finite number of seconds ≥ 0, got {act_s}")
    if graph is not None and step.phase is not None:
        raise DlschedError("--collective-phase splits a --step-time; a model's all-reduce follows its buckets "
                           "and the network's α and β")
    limits.check_work(limits.simulate_work(len(shape.bucket_bytes), processes, iterations, len(kinds)),
                      limits.SIMULATE, "simulate", max_work)
    factors, delays = imb.draw(processes, iterations, seed)
    out = {"source": "model" if graph is not None else "step-time", "workers": processes,
           "iterations": iterations, "seed": seed, "imbalance": imb.spec, "activation": activation,
           "algorithm": algorithm, "alpha_s": alpha, "beta_Bps": beta, "step_compute_s": shape.compute_s,
           "gradient_bytes": shape.gradient_bytes, "buckets": len(shape.bucket_bytes),
           "collective_phase_s": shape.phase_s, "sync_every": comparison.sync_every,
           "allreduce_s": shape.phase_s if shape.phase_s is not None else
           sum(allreduce_cost(algorithm, processes, n, alpha, beta) for n in shape.bucket_bytes),
           "activation_s": act_s, "collectives": {}}
    if graph is not None:
        out["model"] = graph.name
    total = len(kinds) * iterations
    for i, kind in enumerate(kinds):
        tick = None if progress is None else (lambda done, off=i * iterations: progress(off + done, total))
        run = run_collective(kind, shape, factors, delays, alpha, beta, algorithm, seed, activation, tick,
                             sync_every=comparison.sync_every, activation_s=act_s)
        out["collectives"][kind] = run.figures()
    if "allreduce" in out["collectives"]:
        base = out["collectives"]["allreduce"]["steps_per_s"]
        for fig in out["collectives"].values():
            fig["speedup"] = fig["steps_per_s"] / base
    return out


def _phase(step: Step) -> float | None:
    """The collective phase of a ``--step-time``, checked: at least 0 and shorter than the step."""
    if step.phase is None:
        return None
    if not (math.isfinite(step.phase) and 0 <= step.phase < step.time):
        raise DlschedError(f"--collective-phase must be at least 0 and shorter than --step-time "
                           f"({step.time:g} s), got {step.phase:g} s")
    return step.phase
