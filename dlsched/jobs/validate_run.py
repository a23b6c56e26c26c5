"""Run a real parameter-server cluster per transfer order and simulate each (DESIGN §4.7): ``dlsched validate``'s job.

:func:`run_validation`:

1. **Hosts** (:func:`dlsched.runtime.hosts.open_hosts`). As root, one network
   namespace per rank joined by a bridge, the server's link shaped to
   ``rate`` by ``tc``; otherwise plain localhost processes, unshaped, and the
   result says so.
2. **In-situ oracle** (:mod:`dlsched.jobs.in_situ_oracle`). Compute: every op
   of the model profiled with the cluster's intra-op threads per process,
   beside the other workers computing. Transfers: ``latency + bytes /
   bandwidth`` measured over the same link
   (:func:`dlsched.profiling.link.measure_link`: a ``net-peer`` in the
   server's namespace, the client in a worker's), so gloo's per-transfer
   overhead is in the fitted latency. The compute level, its slow-down beside
   transfers and its step-to-step variation come from the cluster itself:
   unscored calibration iterations of the measured job, unordered and in TIC
   order (:func:`run_orders`).
3. **Every order in one job** (``random`` is the unordered baseline; ``topo``,
   ``tic``, ``tac`` are enforced from :func:`dlsched.analyses.orders.compute_order`
   with the profile's times), interleaved one iteration each so that the
   machine's drift hits each alike: the real job through
   :func:`dlsched.hooks.torch_ps.launch_local`, warm-up rounds dropped; per
   order, :func:`~dlsched.analyses.multiworker.simulate_workers` of the same
   configuration under every link model, and every measured iteration replayed
   with the transfer order its servers really sent
   (:func:`~dlsched.analyses.validate.replay_iteration`).

What ``dlsched validate`` reports of it is :mod:`dlsched.answers.validate`.

Examples
--------
>>> pick_rate(compute=0.1, transfer_bytes=25e6, workers=2)
'4000mbit'
>>> r = run_validation("examples/torch_models.py:small_cnn", orders=("random", "tac"))  # doctest: +SKIP
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from dlsched import limits
from dlsched.analyses.links import LINK_POLICIES
from dlsched.analyses.orders import compute_order
from dlsched.analyses.validate import (measured_iterations, observed_priorities, predict_iterations,
                                       replay_iteration, send_places)
from dlsched.errors import DlschedError
from dlsched.hooks.torch_ps import launch_local
from dlsched.importers.loader import detect_format, load_model
from dlsched.machine import busy_cores
from dlsched.profiling.link import measure_link
from dlsched.profiling.network import LinkMeasurement
from dlsched.runtime import netns
from dlsched.runtime.cgroups import cpu_share
from dlsched.runtime.hosts import Hosts, open_hosts
from dlsched.runtime.ps_config import PSConfig, check_settings
from dlsched.runtime.ps_protocol import send_order
from dlsched.timeline import Timeline

from .co_runner import cluster_load
from .in_situ_oracle import ORACLE_RUNS, InSituOracle, in_situ_oracle
from .interleave import balanced_rounds, slot_schedule

#: Orders ``validate`` runs: the unordered baseline and the enforced ones.
ORDERS = ("random", "topo", "tic", "tac")
#: Iterations simulated per order and link model (at least the measured ones): the predicted mean is the
#: simulator's expectation, not a second 20-sample estimate whose own spread (±0.08 on a ratio at 20) adds to
#: the measured one's.
PREDICTED_ITERATIONS = 400
#: The unscored calibration slots of each round (:func:`run_orders`): an unordered iteration, and one in
#: TIC order, in which the workers compute beside their transfers and beside each other as enforced orders do.
CALIBRATION = ("calibration", "calibration-tic")


def pick_rate(compute: float, transfer_bytes: float, workers: int, ratio: float = 1.0) -> str:
    """The ``tc`` rate at which the server link's load is ``ratio`` times a worker's compute.

    ``W·bytes / rate = ratio · C``: at ``ratio = 1`` the link and the compute
    are equally loaded, where ordering matters most (``S`` is largest); a
    large ``ratio`` is communication-bound, a small one compute-bound. Rounded
    to whole Mbit/s.

    Raises
    ------
    DlschedError
        A non-positive compute time, byte count or ratio.
    """
    if not (compute > 0 and transfer_bytes > 0 and ratio > 0):
        raise DlschedError(f"cannot pick a link rate from compute {compute!r} s, {transfer_bytes!r} bytes and "
                           f"ratio {ratio!r}: all must be positive")
    bits = 8 * workers * transfer_bytes / (ratio * compute)
    return f"{max(1, round(bits / 1e6))}mbit"


def hosts_link(hosts: Hosts, timeout: float = 60.0) -> LinkMeasurement:
    """Measure the link of ``hosts`` (:func:`dlsched.profiling.link.measure_link`): on ``netns`` hosts the
    peer runs in the server's namespace and the client in the first worker's.

    Raises
    ------
    NetworkError
        The peer does not start or the measurement fails.
    """
    rate_bytes = netns.tc_rate_bytes(hosts.rate) if hosts.rate else None
    if hosts.cluster is None:
        return measure_link(rate_bytes, timeout=timeout)
    return measure_link(rate_bytes, hosts.cluster.address(0), hosts.prefixes()[:2], hosts.envs()[:2], timeout)


@dataclass
class OrderRun:
    """One order's real run and its simulations."""

    name: str
    priorities: dict | None
    timeline: object
    measured: list
    predicted: dict  # sharing -> MultiWorkerResult
    replayed: dict = field(default_factory=dict)  # sharing -> [iteration time per measured iteration]


def _config(model: str, graph, rotation: list, guess: float, *, workers: int, servers: int, mode: str,
            batch: int, iterations: int, threads: int, seed: int) -> PSConfig:
    """The parameter-server job: iteration ``i`` in send order ``rotation[i % len]`` (``None``: unordered);
    ``guess`` is a generous iteration time, which sets the timeouts."""
    recvs = graph.recvs()
    return PSConfig(model=model, order=[r.name for r in recvs], ps={r.name: r.ps for r in recvs}, servers=servers,
                    workers=workers, iterations=iterations, batch=batch, mode=mode, rotation=rotation, window=1,
                    timeout=max(60.0, 20 * guess), lr=0.001, seed=seed, threads=threads)


def sent_priorities(cfg: PSConfig, iterations: Sequence[int]) -> list[list[dict[str, int]]]:
    """Per iteration, each worker's transfer order as priorities: what the servers send it
    (:func:`~dlsched.runtime.ps_protocol.send_order`; an unordered iteration's seeded permutation is known
    before the job), as :func:`~dlsched.analyses.validate.observed_priorities` reads it from a record."""
    return [[send_places(send_order(cfg, s, w, it) for s in range(cfg.servers)) for w in range(cfg.workers)]
            for it in iterations]


def run_orders(model: str, graph, oracle: InSituOracle, hosts: Hosts, orders: Sequence[str], *, workers: int,
               servers: int, mode: str, batch: int, iterations: int, warmup: int, threads: int,
               sharings: Sequence[str], seed: int = 0) -> dict[str, OrderRun]:
    """Run every order for real in one job, interleaved; calibrate the oracle's compute from it; simulate each.

    The job's iterations go round the slots ``calibration, calibration-tic,
    *orders``, one iteration each (:attr:`~dlsched.runtime.ps_config.PSConfig.rotation`),
    for ``warmup`` dropped rounds and then ``iterations`` measured ones. Run
    one after another, the orders met a small VM in different moods: its
    speed drifted by 10% over minutes, which moved the measured throughput
    ratios by more than the ±0.05 they are checked to. Interleaved, a drift
    hits every order alike. The slots' order changes from round to round
    (:func:`~dlsched.jobs.interleave.balanced_rounds`), so that no slot always
    follows the same one or always stands first.

    The two calibration slots are never scored: one unordered iteration, and
    one in TIC order. Their records set the oracle's compute
    (:meth:`InSituOracle.calibrate`): its level with the link quiet, how much
    slower it runs beside the worker's own transfers (under TIC about half a
    step does, unordered little), and each worker's step over the median step,
    each busy second counted at the pace of all workers computing at once
    (``oracle.crowd``: on shared cores beside other load, a worker computing
    alone runs faster than two at once).
    The calibrated simulator then runs the calibration iterations themselves
    (``oracle.check``): fitted to their busy time, it need not reproduce their
    iteration times (beside a busy loop, with one level for every op, it
    predicted the TIC ones 1–5.5% fast, as it did TAC; the crowding took that
    out).
    A predicted iteration draws the workers' factors together, from one
    unordered calibration iteration for ``random`` and from one TIC iteration
    for the enforced orders: under an enforced order both workers get their
    first parameters at once and compute at the same moment on shared cores,
    so one is slowed by the other (transformer inference on a 2-core VM: their
    steps correlated −0.47 and −0.84 in two runs, against +0.30 and +0.09
    unordered), which independent draws miss.
    In the cluster a step runs through the hooks that wait for parameters, on
    weights just written by the receives, beside a server: on a small VM its
    level was ×0.75 to ×1.48 that of the same step profiled beside a
    co-runner (mostly ×1.1 to ×1.3), so the per-op profile keeps only its
    shape. The enforced orders are computed before the job, from the profile,
    as a user computes them from theirs. The unordered ones are seeded
    permutations (:func:`sent_priorities`), also known before the job:
    ``random`` is predicted with the very permutations its scored iterations
    send, so which ones a run drew moves measured and predicted alike.
    """
    prios = {name: None if name == "random" else compute_order(graph, name, oracle.times) for name in orders}
    tic = prios.get("tic") or compute_order(graph, "tic", oracle.times)
    slots = [*CALIBRATION, *orders]
    send = dict(zip(slots, [None if p is None else sorted(p, key=lambda n, p=p: (p[n], n))
                            for p in (None, tic, *(prios[o] for o in orders))]))
    cycle = slot_schedule(slots, len(balanced_rounds(len(slots))))  # one whole design; the job repeats it
    guess = 1.5 * (oracle.compute + oracle.transfer_bytes * workers / oracle.link["bandwidth"])
    total = len(slots) * (warmup + iterations)
    cfg = _config(model, graph, [send[s] for s in cycle], guess, workers=workers, servers=servers, mode=mode,
                  batch=batch, iterations=total, threads=threads, seed=seed)
    run = launch_local(cfg, timeout=120 + 10 * guess * total, prefixes=hosts.prefixes(), env=hosts.envs(),
                       init_method=hosts.init_method())
    kept = set(run.timeline.iterations[len(slots) * warmup:])

    def slot(name: str) -> Timeline:
        return Timeline([r for r in run.timeline.records
                         if r.iteration in kept and cycle[r.iteration % len(cycle)] == name])

    oracle.calibrate(*(list(slot(name).by_iteration().values()) for name in CALIBRATION))
    spans = {m["iteration"]: m for m in measured_iterations(run.timeline)}  # each from the previous slot's end

    def predict(priorities, iterations_run: Sequence[int]) -> dict:
        """Per link model, the simulated iterations of an order (None: unordered, with the permutations
        ``iterations_run`` sent), its workers' factors drawn from calibration iterations of its kind."""
        kind, sent = ("unordered", sent_priorities(cfg, iterations_run)) if priorities is None else ("enforced", None)
        return {s: predict_iterations(graph, oracle.times, workers, priorities, max(iterations, PREDICTED_ITERATIONS),
                                      s, oracle.factors[kind], seed, overlap=oracle.overlap, sent=sent,
                                      crowd=oracle.crowd)
                for s in sharings}

    cal = [slot(name).iterations for name in CALIBRATION]
    checks = {"unordered": (cal[0], predict(None, cal[0])), "tic": (cal[1], predict(tic, cal[1]))}
    oracle.check = {s: {name: (statistics.fmean(spans[it]["iteration_time"] for it in its),
                               float(p[s].per_iteration["iteration_time"].mean())) for name, (its, p) in checks.items()}
                    for s in sharings}  # the calibrated simulator on the calibration iterations themselves
    out = {}
    for name in orders:
        timeline = slot(name)
        predicted = predict(prios[name], timeline.iterations)
        sent = {it: [observed_priorities(r) for r in rs] for it, rs in timeline.by_iteration().items()}
        replayed = {s: [max(replay_iteration(graph, oracle.times, sent[it], s, overlap=oracle.overlap,
                                             crowd=oracle.crowd))
                        for it in timeline.iterations] for s in sharings}
        out[name] = OrderRun(name, prios[name], timeline, [spans[it] for it in timeline.iterations], predicted,
                             replayed)
    return out


@dataclass
class Validation:
    """Everything ``dlsched validate`` reports (see :func:`run_validation`)."""

    model: str
    mode: str
    workers: int
    servers: int
    batch: int
    threads: int
    hosts: dict
    oracle: InSituOracle
    runs: dict  # order -> OrderRun
    sharings: tuple
    wall_s: float = 0.0


def run_validation(model: str, *, workers: int = 2, servers: int = 1, rate: str | None = "auto",
                   mode: str = "inference", orders: Sequence[str] = ORDERS, iterations: int = 20, warmup: int = 3,
                   batch: int = 8, threads: int = 1, network: str = "auto", sharings: Sequence[str] | None = None,
                   seed: int = 0, max_work: int | None = None,
                   say: Callable[[str], None] = lambda s: None) -> Validation:
    """Run ``model`` on a real parameter-server cluster under each order and simulate each (DESIGN §4.7).

    Parameters
    ----------
    model : str
        A PyTorch factory ``path/file.py:fn`` or ``package.module:fn``.
    rate : str
        The server link's ``tc`` rate (``1gbit``), or ``auto``: the rate at
        which the link's load equals a worker's compute (:func:`pick_rate`,
        where ordering matters most).
    orders : sequence of str
        Among ``random, topo, tic, tac``.
    iterations, warmup : int
        Measured iterations per order, after ``warmup`` dropped ones.
    network : {"auto", "netns", "localhost"}
        ``auto``: namespaces with a shaped link as root, else localhost.
    sharings : sequence of str, optional
        Link models to predict with (default: all of
        :data:`~dlsched.analyses.links.LINK_POLICIES`).
    max_work : int, optional
        Most real iterations accepted (default :data:`dlsched.limits.CLUSTER`).
    say : callable
        Hears one line per step (progress).

    Raises
    ------
    DlschedError
        Bad settings or too many iterations (before any process starts), a
        model that is not a PyTorch factory, a failed measurement or a failed
        rank.
    """
    bad = sorted(set(orders) - set(ORDERS))
    if bad or not orders or len(set(orders)) != len(orders):
        raise DlschedError(f"--orders takes distinct names among {', '.join(ORDERS)}, got {', '.join(orders) or '-'}")
    sharings = tuple(sharings or LINK_POLICIES)
    if set(sharings) - set(LINK_POLICIES):
        raise DlschedError(f"unknown link model(s) {sorted(set(sharings) - set(LINK_POLICIES))}; "
                           f"expected among {', '.join(LINK_POLICIES)}")
    if not isinstance(warmup, int) or warmup < 0:
        raise DlschedError(f"--warmup must be a whole number ≥ 0, got {warmup!r}")
    check_settings(workers=workers, servers=servers, iterations=iterations, batch=batch, threads=threads,
                   mode=mode, seed=seed)
    limits.check_work(limits.ranks_work(workers + servers, f"{limits.plural(workers, 'worker')} + "
                                                           f"{limits.plural(servers, 'server')}"),
                      limits.RANKS, "validate", max_work)
    limits.check_work(limits.cluster_work(len(orders), iterations, warmup), limits.CLUSTER, "validate", max_work)
    if rate not in (None, "auto"):
        netns.tc_rate_bytes(rate)
    if detect_format(model) != "torch":
        raise DlschedError(f"validate runs PyTorch models on a real cluster; {model!r} is not a PyTorch factory "
                           "(path/file.py:fn or package.module:fn)")
    t0 = time.monotonic()
    graph = load_model(model, mode=mode, batch=batch, ps=servers)
    say("measuring the machine's other load")
    background = busy_cores(1.0)  # before any process of ours computes
    hosts = None
    try:
        if rate == "auto" and (network == "localhost" or not netns.available()):
            rate = None
        if rate == "auto":  # profile compute on the host first, then shape the link to match it
            say("profiling compute to pick the rate")
            pre = in_situ_oracle(model, graph, LinkMeasurement(1e9, 0.0, "none"), threads, runs=3)
            rate = pick_rate(pre.compute, pre.transfer_bytes, workers)
            say(f"picked rate {rate} (server link load = one worker's compute)")
        hosts = open_hosts(network, servers + workers, rate)
        say(f"hosts: {hosts.note}")
        say("measuring the link")
        link = hosts_link(hosts)
        say(f"link: {link.bandwidth * 8 / 1e6:.0f} Mbit/s, latency {link.latency * 1e6:.0f} us")
        say("profiling compute beside the other workers")
        with cluster_load(model, mode, batch, threads, workers):
            oracle = in_situ_oracle(model, graph, link, threads, runs=ORACLE_RUNS)
        oracle.crowded(workers, cpu_share(), background)  # the cores it may use, quotas included
        say(f"running the orders interleaved, one iteration each in turn with two unscored calibration "
            f"iterations, their order balanced across rounds: {warmup} + {iterations} rounds of "
            f"{len(orders) + len(CALIBRATION)}")
        runs = run_orders(model, graph, oracle, hosts, orders, workers=workers, servers=servers, mode=mode,
                          batch=batch, iterations=iterations, warmup=warmup, threads=threads, sharings=sharings,
                          seed=seed)
        say(f"compute per step in the cluster: {oracle.compute:.3f} s (the profile's x{oracle.scale:.3f}), "
            f"x{oracle.overlap:.3f} beside transfers")
        host_info = {"kind": hosts.kind, "rate": hosts.rate, "note": hosts.note}
    finally:
        if hosts is not None:
            hosts.close()
    return Validation(model, mode, workers, servers, batch, threads, host_info, oracle, runs, sharings,
                      time.monotonic() - t0)
