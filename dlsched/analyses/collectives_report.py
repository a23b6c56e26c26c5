"""``dlsched simulate --collective/--compare allreduce,solo,majority``: one JSON-able report (DESIGN §4.8).

The step comes from ``--step-time`` (a step of that many seconds that
all-reduces ``gradient_bytes`` at its end, to replay the paper's experiments
without a model) or from a model's DAG and oracle (:mod:`.ddp_buckets`). The
network's α and β are given, or fitted to the oracle's transfers. Every
collective sees the same imbalance draw (:mod:`.imbalance`) and is simulated
by :func:`.allreduce_sim.run_collective`; each reports its figures and, when
the synchronous all-reduce is compared too, its speedup over it.

Examples
--------
>>> r = collectives_report(["allreduce", "solo"], processes=8, iterations=20, imbalance="random:k=1:delay=200ms",
...                        step_time=0.41)
>>> round(1 / r["collectives"]["allreduce"]["steps_per_s"], 4)  # e + D + ring all-reduce 14·α
0.6107
>>> r["collectives"]["solo"]["speedup"] > 1.3
True
"""
from __future__ import annotations

from typing import Mapping, Sequence

from dlsched import limits
from dlsched.dag import Graph
from dlsched.errors import DlschedError

from .allreduce_sim import ACTIVATIONS, COLLECTIVES, StepShape, run_collective
from .collective_cost import ALGORITHMS, activation_broadcast, allreduce_cost, check_network
from .ddp_buckets import DEFAULT_BUCKET_BYTES, network_from_oracle, step_shape
from .imbalance import parse_imbalance

#: The network assumed with --step-time and no --latency/--bandwidth (profile's defaults).
DEFAULT_LATENCY_S, DEFAULT_BANDWIDTH_BPS = 50e-6, 10e9 / 8


def parse_collectives(text: str | None) -> list[str] | None:
    """``"allreduce,solo"`` → ``["allreduce", "solo"]``; ``None`` when ``text`` names no collective at all.

    Raises
    ------
    DlschedError
        A list mixing collectives with other names (orders), or naming one twice.
    """
    if not text:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    known = [n for n in names if n in COLLECTIVES]
    if not known:
        return None
    if len(known) != len(names):
        other = ", ".join(n for n in names if n not in COLLECTIVES)
        raise DlschedError(f"--compare {text!r} mixes collectives ({', '.join(known)}) with {other}; compare "
                           f"either collectives ({', '.join(COLLECTIVES)}) or transfer orders, not both")
    if len(set(names)) != len(names):
        raise DlschedError(f"--compare {text!r} names a collective twice")
    return names


def collectives_report(kinds: Sequence[str], processes: int, iterations: int, imbalance: str | None = None, *,
                       step_time: float | None = None, gradient_bytes: int = 0, graph: Graph | None = None,
                       times: Mapping[str, float] | None = None, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                       latency: float | None = None, bandwidth: float | None = None, algorithm: str = "ring",
                       activation: str = "free-running", seed: int = 0, max_work: int | None = None,
                       progress=None) -> dict:
    """Simulate ``kinds`` side by side and return the report.

    Keys: ``source`` (``model`` or ``step-time``), ``workers``, ``iterations``,
    ``seed``, ``imbalance``, ``activation``, ``algorithm``, ``alpha_s``,
    ``beta_Bps``, ``step_compute_s``, ``gradient_bytes``, ``buckets``,
    ``allreduce_s`` (one step's all-reduces), ``activation_s``, ``model`` (with a
    model), and ``collectives``: per collective the figures of
    :meth:`.allreduce_sim.CollectiveRun.figures` (``steps_per_s``,
    ``mean_iteration_s``, ``iteration_s_per_process``, ``mean_latency_s``,
    ``mean_nap``, ``nap``, ``mean_staleness``, ``max_staleness``,
    ``missed_rate``, ``queued_at_end``, ``initiators``) plus ``speedup`` over
    the synchronous all-reduce when it is compared. ``progress(steps done,
    total)`` is called now and then, counting the steps of every collective.

    Raises
    ------
    DlschedError
        Neither or both of a step time and a model, an unknown collective,
        algorithm or activation model, a bad imbalance, work above the budget.
    """
    if (step_time is None) == (graph is None):
        raise DlschedError("give either a MODEL (with --oracle) or --step-time SECONDS, not both or neither")
    bad = [k for k in kinds if k not in COLLECTIVES]
    if bad or not kinds:
        raise DlschedError(f"unknown collective(s) {', '.join(bad) or '(none)'}; choose from {', '.join(COLLECTIVES)}")
    if algorithm not in ALGORITHMS or activation not in ACTIVATIONS:
        raise DlschedError(f"unknown algorithm {algorithm!r} or activation {activation!r}")
    imb = parse_imbalance(imbalance)
    if graph is not None:
        shape = step_shape(graph, times, bucket_bytes)
        if latency is None or bandwidth is None:
            fit_alpha, fit_beta = network_from_oracle(graph, times)
            latency = fit_alpha if latency is None else latency
            bandwidth = fit_beta if bandwidth is None else bandwidth
    else:
        if not step_time > 0:
            raise DlschedError(f"--step-time must be a positive number of seconds, got {step_time}")
        shape = StepShape.single(step_time, gradient_bytes)
    alpha = DEFAULT_LATENCY_S if latency is None else latency
    beta = DEFAULT_BANDWIDTH_BPS if bandwidth is None else bandwidth
    check_network(alpha, beta)
    limits.check_work(limits.simulate_work(len(shape.bucket_bytes), processes, iterations, len(kinds)),
                      limits.SIMULATE, "simulate", max_work)
    factors, delays = imb.draw(processes, iterations, seed)
    out = {"source": "model" if graph is not None else "step-time", "workers": processes,
           "iterations": iterations, "seed": seed, "imbalance": imb.spec, "activation": activation,
           "algorithm": algorithm, "alpha_s": alpha, "beta_Bps": beta, "step_compute_s": shape.compute_s,
           "gradient_bytes": shape.gradient_bytes, "buckets": len(shape.bucket_bytes),
           "allreduce_s": sum(allreduce_cost(algorithm, processes, n, alpha, beta) for n in shape.bucket_bytes),
           "activation_s": activation_broadcast(processes, alpha), "collectives": {}}
    if graph is not None:
        out["model"] = graph.name
    total = len(kinds) * iterations
    for i, kind in enumerate(kinds):
        tick = None if progress is None else (lambda done, off=i * iterations: progress(off + done, total))
        run = run_collective(kind, shape, factors, delays, alpha, beta, algorithm, seed, activation, tick)
        out["collectives"][kind] = run.figures()
    if "allreduce" in out["collectives"]:
        base = out["collectives"]["allreduce"]["steps_per_s"]
        for fig in out["collectives"].values():
            fig["speedup"] = fig["steps_per_s"] / base
    return out
