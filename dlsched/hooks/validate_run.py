"""Run a real parameter-server cluster per transfer order and set the simulator's prediction beside it (DESIGN §4.7).

:func:`run_validation` is what ``dlsched validate MODEL`` runs:

1. **Hosts.** As root, one network namespace per rank joined by a bridge,
   the server's link shaped to ``rate`` by ``tc`` (:mod:`dlsched.runtime.netns`);
   otherwise plain localhost processes, unshaped, and the result says so.
2. **In-situ oracle.** Compute: every op of the model profiled with the
   cluster's intra-op threads per process (the median of ``runs`` runs, since
   the cluster's iterations are not best cases either). Transfers:
   ``latency + bytes / bandwidth`` from ``--measure-network`` over the same
   link (a ``net-peer`` in the server's namespace, the client in a worker's),
   so gloo's per-transfer overhead is in the fitted latency.
   The compute level, its slow-down beside transfers and its step-to-step
   variation come from the cluster itself: unscored calibration iterations of
   the measured job, unordered and in TIC order (:func:`run_orders`).
3. **Every order in one job** (``random`` is the unordered baseline; ``topo``,
   ``tic``, ``tac`` are enforced from :func:`dlsched.analyses.orders.compute_order`
   with the profile's times), interleaved one iteration each so that the
   machine's drift hits each alike: the real job through
   :func:`dlsched.hooks.torch_ps.launch_local`, warm-up rounds dropped; per
   order, :func:`~dlsched.analyses.multiworker.simulate_workers` of the same
   configuration under every link model, and every measured iteration replayed
   with the transfer order its servers really sent
   (:func:`~dlsched.analyses.validate.replay_iteration`).

Examples
--------
>>> pick_rate(compute=0.1, transfer_bytes=25e6, workers=2)
'4000mbit'
>>> r = run_validation("examples/torch_models.py:small_cnn", orders=("random", "tac"))  # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from dlsched.errors import DlschedError
from dlsched.machine import cpu_model, load_average

#: Orders ``validate`` runs: the unordered baseline and the enforced ones.
ORDERS = ("random", "topo", "tic", "tac")
NETWORKS = ("auto", "netns", "localhost")
#: Profiled runs per op of the in-situ oracle. A small VM's speed drifts by several percent over seconds;
#: a profile of 5 runs (2 s) caught such phases and moved the oracle's compute by up to 15%.
ORACLE_RUNS = 15
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


@dataclass
class Hosts:
    """Where the ranks run: ``kind`` is ``netns`` (shaped link) or ``localhost``."""

    kind: str
    rate: str | None
    note: str
    cluster: object = None
    ranks: int = 0

    def prefixes(self) -> list[list[str]] | None:
        return [self.cluster.exec_prefix(i) for i in range(self.ranks)] if self.cluster else None

    def envs(self) -> list[dict] | None:
        from dlsched.runtime.launcher import rank_env
        return [rank_env(self.cluster.ifname(i)) for i in range(self.ranks)] if self.cluster else None

    def init_method(self) -> str | None:
        if not self.cluster:
            return None
        return f"tcp://{self.cluster.address(0)}:{random.randint(20000, 30000)}"

    def close(self) -> None:
        if self.cluster:
            self.cluster.destroy()


def open_hosts(network: str, ranks: int, rate: str | None) -> Hosts:
    """Build the hosts of a ``ranks``-process cluster (``network``: auto, netns or localhost).

    Raises
    ------
    DlschedError
        ``netns`` asked for without root, or the namespaces cannot be made.
    """
    from dlsched.runtime import netns
    if network not in NETWORKS:
        raise DlschedError(f"--network must be one of {', '.join(NETWORKS)}, got {network!r}")
    if network == "netns" and not netns.available():
        raise DlschedError("--network netns needs root and the ip and tc tools (network namespaces with a "
                           "tc-shaped link); run as root, or use --network localhost")
    if network == "localhost" or not netns.available():
        why = "asked for" if network == "localhost" else "not root, so no network namespaces"
        return Hosts("localhost", None, f"plain localhost processes ({why}): the link is loopback, unshaped"
                     + (f"; --rate {rate} is not applied" if rate else ""), ranks=ranks)
    if rate is None:
        raise DlschedError("a shaped link needs a rate; give --rate (e.g. 1gbit) or --rate auto")
    netns.tc_rate_bytes(rate)
    cluster = netns.Cluster(ranks, rate)
    cluster.create()
    return Hosts("netns", rate, f"network namespaces, server link shaped to {rate} by tc tbf", cluster, ranks)


_CLIENT = ("import json, sys\nfrom dlsched.profiling.network import measure_peer\n"
           "m = measure_peer(sys.argv[1], int(sys.argv[2]), sizes=json.loads(sys.argv[3]), repeats=3)\n"
           "print('LINK ' + json.dumps(m.to_dict()), flush=True)\n")
#: The small transfer whose round trip gives the per-transfer latency (gloo's overhead included).
SMALL = 4096


def link_sizes(rate_bytes: float | None) -> list[int]:
    """Transfer sizes of the link measurement: :data:`SMALL` three times (a round trip of a few
    microseconds is easily delayed by a busy CPU; the minimum of 9 counts), then three sizes well past
    tc's 128 KB burst, the largest taking about 0.4 s on the link (1 MB to 16 MB).

    Examples
    --------
    >>> link_sizes(12.5e6)
    [4096, 4096, 4096, 1250000, 2500000, 5000000]
    >>> link_sizes(None)[-1]
    16777216
    """
    big = int(min(16 << 20, max(1 << 20, 0.4 * rate_bytes))) if rate_bytes else 16 << 20
    return [SMALL] * 3 + [big // 4, big // 2, big]


def link_from_minima(m):
    """Bandwidth from the large transfers' slope, one-way latency from the small round trip / 2.

    A tc token bucket sends its burst (128 KB) at line rate, so a fit over all
    sizes bends towards it; a model's transfers go back to back and keep the
    bucket empty, so only the sizes past the burst say what the link carries.
    """
    from dlsched.profiling.network import fit_link
    big = [(s, t) for s, t in zip(m.sizes, m.min_times) if s > SMALL]
    bandwidth, _ = fit_link([s for s, _ in big], [t for _, t in big])
    m.bandwidth, m.latency = bandwidth, min(t for s, t in zip(m.sizes, m.min_times) if s == SMALL) / 2
    return m


def measure_link(hosts: Hosts, timeout: float = 60.0):
    """Measure the cluster's own link (:class:`~dlsched.profiling.network.LinkMeasurement`).

    On ``netns`` hosts a ``dlsched net-peer`` runs in the server's namespace
    and the client in the first worker's, so the figures are those of the
    shaped link, gloo's per-transfer overhead included (:func:`link_from_minima`).

    Raises
    ------
    NetworkError
        The peer does not start or the measurement fails.
    """
    from dlsched.profiling.network import LinkMeasurement, NetworkError, _read_line, _reap, measure_local

    from dlsched.runtime.netns import tc_rate_bytes
    sizes = link_sizes(tc_rate_bytes(hosts.rate) if hosts.rate else None)
    if hosts.cluster is None:
        return link_from_minima(measure_local(sizes=sizes, repeats=3, timeout=timeout))
    c = hosts.cluster
    envs, pre = hosts.envs(), hosts.prefixes()
    peer = subprocess.Popen(pre[0] + [sys.executable, "-m", "dlsched.cli.main", "net-peer", "--host", c.address(0),
                                      "--port", "0", "--sessions", "1", "--timeout", str(timeout)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(envs[0], PYTHONUNBUFFERED="1"))
    try:
        line = _read_line(peer, time.monotonic() + 120)
        if not line or "listening on" not in line:
            raise NetworkError(f"the network peer in the server's namespace did not start: {_reap(peer)}")
        port = line.rsplit(":", 1)[1]
        try:
            out = subprocess.run(pre[1] + [sys.executable, "-c", _CLIENT, c.address(0), port, json.dumps(sizes)],
                                 env=envs[1], capture_output=True, text=True, timeout=timeout * 10)
        except subprocess.TimeoutExpired:
            raise NetworkError(f"measuring the shaped link took over {timeout * 10:.0f} s") from None
        got = [ln for ln in out.stdout.splitlines() if ln.startswith("LINK ")]
        if out.returncode or not got:
            tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
            raise NetworkError(f"measuring the shaped link failed: {tail}")
        return link_from_minima(LinkMeasurement(**json.loads(got[-1][5:])))
    finally:
        _reap(peer)


@contextlib.contextmanager
def cluster_load(model: str, mode: str, batch: int, threads: int, workers: int):
    """Load the machine as the cluster's other workers do, while compute is profiled or timed.

    On a machine with few cores the cluster's ranks share the CPU: ``W``
    workers compute at once, so a profile taken alone is too fast. This runs
    ``W − 1`` co-runners computing the model's step in a loop (``threads`` each).
    """
    from dlsched.profiling.network import _reap
    procs = []
    try:
        spec = json.dumps({"model": model, "mode": mode, "batch": batch, "threads": threads})
        for _ in range(workers - 1):
            procs.append(subprocess.Popen([sys.executable, "-m", "dlsched.hooks.validate_run", spec],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          env=dict(os.environ, OMP_NUM_THREADS=str(threads))))
        time.sleep(1.0)  # the co-runners are past their imports
        yield
    finally:
        for p in reversed(procs):
            _reap(p)


def _co_run(spec_json: str) -> int:
    """A co-runner of :func:`cluster_load`: the model's step in a loop until killed."""
    import torch

    from dlsched.factory import call_factory, training_loss
    spec = json.loads(spec_json)
    torch.set_num_threads(spec["threads"])
    module, inputs, _ = call_factory(spec["model"], batch=spec["batch"])
    while True:
        if spec["mode"] == "training":
            module.train()
            training_loss(module(*inputs)).backward()
        else:
            with torch.no_grad():
                module(*inputs)


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
    scale: float = 1.0

    def rescale(self, scale: float) -> None:
        """Multiply every compute op's time by ``scale`` (the profile's shape, the cluster's level)."""
        for o in self.graph.compute_ops():
            self.times[o.name] *= scale
        self.compute *= scale
        self.scale *= scale

    def calibrate(self, unordered: Sequence[Sequence], enforced: Sequence[Sequence]) -> None:
        """Set level, slow-down beside transfers and step factors from the calibration iterations' records
        (each a list of one iteration's workers' records; :func:`~dlsched.analyses.calibration.calibrate_compute`)."""
        from dlsched.analyses.calibration import calibrate_compute, compute_split
        groups = [*unordered, *enforced]
        fit = calibrate_compute([compute_split(r) for g in groups for r in g], self.compute)
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
    import warnings

    from dlsched.profiling.oracle_times import oracle_times
    from dlsched.profiling.oracle import build_oracle
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


@dataclass
class OrderRun:
    """One order's real run and its simulations."""

    name: str
    priorities: dict | None
    timeline: object
    measured: list
    predicted: dict  # sharing -> MultiWorkerResult
    replayed: dict = field(default_factory=dict)  # sharing -> [iteration time per measured iteration]


def _job(model: str, graph, hosts: Hosts, rotation: list, guess: float, *, workers: int, servers: int,
         mode: str, batch: int, iterations: int, threads: int, seed: int):
    """Run the parameter-server job on ``hosts``, iteration ``i`` in send order ``rotation[i % len]``
    (``None``: unordered); ``guess`` is a generous iteration time, which sets the timeouts."""
    from .torch_ps import PSConfig, launch_local
    recvs = graph.recvs()
    cfg = PSConfig(model=model, order=[r.name for r in recvs], ps={r.name: r.ps for r in recvs}, servers=servers,
                   workers=workers, iterations=iterations, batch=batch, mode=mode, rotation=rotation, window=1,
                   timeout=max(60.0, 20 * guess), lr=0.001, seed=seed, threads=threads)
    return launch_local(cfg, timeout=120 + 10 * guess * iterations, prefixes=hosts.prefixes(), env=hosts.envs(),
                        init_method=hosts.init_method())


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
    hits every order alike.

    The two calibration slots are never scored: one unordered iteration, and
    one in TIC order. Their records set the oracle's compute
    (:meth:`InSituOracle.calibrate`): its level with the link quiet, how much
    slower it runs beside the worker's own transfers (under TIC about half a
    step does, unordered little), and each worker's step over the median step.
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
    as a user computes them from theirs.
    """
    from dlsched.analyses.orders import compute_order
    from dlsched.analyses.validate import (measured_iterations, observed_priorities, predict_iterations,
                                           replay_iteration)

    from dlsched.timeline import Timeline
    prios = {name: None if name == "random" else compute_order(graph, name, oracle.times) for name in orders}
    tic = prios.get("tic") or compute_order(graph, "tic", oracle.times)
    slots = [*CALIBRATION, *orders]
    rotation = [None if p is None else sorted(p, key=lambda n, p=p: (p[n], n))
                for p in (None, tic, *(prios[o] for o in orders))]
    guess = 1.5 * (oracle.compute + oracle.transfer_bytes * workers / oracle.link["bandwidth"])
    run = _job(model, graph, hosts, rotation, guess, workers=workers, servers=servers, mode=mode, batch=batch,
               iterations=len(slots) * (warmup + iterations), threads=threads, seed=seed)
    kept = set(run.timeline.iterations[len(slots) * warmup:])

    def slot(name: str) -> Timeline:
        return Timeline([r for r in run.timeline.records
                         if r.iteration in kept and slots[r.iteration % len(slots)] == name])

    oracle.calibrate(*(list(slot(name).by_iteration().values()) for name in CALIBRATION))
    spans = {m["iteration"]: m for m in measured_iterations(run.timeline)}  # each from the previous slot's end
    out = {}
    for name in orders:
        timeline = slot(name)
        factors = oracle.factors["unordered" if prios[name] is None else "enforced"]
        predicted = {s: predict_iterations(graph, oracle.times, workers, prios[name], iterations, s, factors, seed,
                                           overlap=oracle.overlap) for s in sharings}
        sent = {it: [observed_priorities(r) for r in rs] for it, rs in timeline.by_iteration().items()}
        replayed = {s: [max(replay_iteration(graph, oracle.times, sent[it], s, overlap=oracle.overlap))
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
    from dlsched.analyses.links import LINK_POLICIES
    from dlsched.importers.loader import detect_format, load_model

    from dlsched.runtime import netns
    from dlsched.runtime.ps_config import check_settings
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
    from dlsched import limits
    limits.check_work(limits.cluster_work(len(orders), iterations, warmup), limits.CLUSTER, "validate", max_work)
    if rate not in (None, "auto"):
        netns.tc_rate_bytes(rate)
    if detect_format(model) != "torch":
        raise DlschedError(f"validate runs PyTorch models on a real cluster; {model!r} is not a PyTorch factory "
                           "(path/file.py:fn or package.module:fn)")
    t0 = time.monotonic()
    graph = load_model(model, mode=mode, batch=batch, ps=servers)
    hosts = None
    try:
        if rate == "auto" and (network == "localhost" or not netns.available()):
            rate = None
        if rate == "auto":  # profile compute on the host first, then shape the link to match it
            say("profiling compute to pick the rate")
            from dlsched.profiling.network import LinkMeasurement
            pre = in_situ_oracle(model, graph, LinkMeasurement(1e9, 0.0, "none"), threads, runs=3)
            rate = pick_rate(pre.compute, pre.transfer_bytes, workers)
            say(f"picked rate {rate} (server link load = one worker's compute)")
        hosts = open_hosts(network, servers + workers, rate)
        say(f"hosts: {hosts.note}")
        say("measuring the link")
        link = measure_link(hosts)
        say(f"link: {link.bandwidth * 8 / 1e6:.0f} Mbit/s, latency {link.latency * 1e6:.0f} us")
        say("profiling compute beside the other workers")
        with cluster_load(model, mode, batch, threads, workers):
            oracle = in_situ_oracle(model, graph, link, threads, runs=ORACLE_RUNS)
        say(f"running the orders interleaved, one iteration each in turn after two unscored calibration "
            f"iterations: {warmup} + {iterations} rounds of {len(orders) + len(CALIBRATION)}")
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


def report(v: Validation, sharing: str) -> dict:
    """The figures ``dlsched validate`` prints, predicting with link model ``sharing``.

    Per order: measured and predicted mean and p95 iteration time and their
    errors (:func:`~dlsched.analyses.validate.compare_order`), throughput over
    random (measured, predicted), straggler share, and ``E``: the predicted
    and measured iteration times rated against the oracle's multi-worker
    bounds ``U_W``/``L_W`` (a measured time outside them is a model error,
    given with its size), and the measured trace's own ``E`` from its
    realised op times (:func:`~dlsched.analyses.multiworker_bounds.rate_ops`).
    """
    from dlsched.analyses.multiworker_bounds import multiworker_bounds, rate, rate_ops
    from dlsched.analyses.validate import add_throughput_ratios, compare_order, fit_line, iteration_stats
    graph_b = multiworker_bounds(v.oracle.graph, v.oracle.times, v.workers)
    U, L = float(graph_b.upper), float(graph_b.lower)

    def mean_e(values):
        rs = [rate(t, U, L) for t in values]
        es = [r.efficiency for r in rs if r.efficiency is not None]
        errs = [r.model_error for r in rs if r.efficiency is None]
        return (float(sum(es) / len(es)) if es else None), len(errs), (max(errs, key=abs) if errs else 0.0)

    rows = {}
    for name, run in v.runs.items():
        row = compare_order(run.measured, run.predicted[sharing])
        pe, _, _ = mean_e(run.predicted[sharing].per_iteration["iteration_time"])
        me, outside, worst = mean_e([r["iteration_time"] for r in run.measured])
        skip = len(run.timeline.iterations) - len(run.measured)
        _, per_it = rate_ops(run.timeline.frame(skip=skip))
        te = per_it["efficiency"].dropna()
        row.update(predicted_efficiency=pe, measured_efficiency=me, measured_outside_bounds=outside,
                   measured_model_error=worst, trace_efficiency=float(te.mean()) if len(te) else None,
                   replayed_mean=iteration_stats(run.replayed[sharing])["mean"])
        rows[name] = row
    add_throughput_ratios(rows)
    pts = fig12_points(v, sharing)  # TicTac Fig. 12a: E of the replayed order against normalised step time
    fig12 = fit_line([e for e, _, _ in pts], [t for _, t, _ in pts])
    total = sum(len(run.measured) for run in v.runs.values())
    return {"model": v.model, "mode": v.mode, "workers": v.workers, "servers": v.servers, "batch": v.batch,
            "threads": v.threads, "hosts": v.hosts, "sharing": sharing, "oracle": v.oracle.describe(),
            "bounds": {"upper": U, "lower": L, "speedup": float(graph_b.speedup)}, "orders": rows,
            "replay_fit": {**fig12, "excluded": total - len(pts)},
            "replay_points": [{"efficiency": e, "normalised_time": t, "order": n} for e, t, n in pts],
            "cpu": cpu_model(), "load_1min": load_average(), "wall_s": v.wall_s}


def validation_outputs(v: Validation, sharing: str | None = None, trace_out: str | None = None,
                       plot: str | None = None) -> dict:
    """:func:`report` under ``sharing`` (default: the simulator's link model), each link model's errors
    side by side (``link_models``), and the optional files: each order's measured Chrome trace in
    ``trace_out`` (``ORDER.trace.json``) and the PNG ``plot``.

    Raises
    ------
    DlschedError
        A file cannot be written.
    """
    from pathlib import Path

    from dlsched.analyses.links import DEFAULT_SHARING
    from dlsched.formats.chrome_trace import write_chrome_trace
    sharing = sharing or DEFAULT_SHARING
    out = report(v, sharing)
    out["link_models"] = {}
    for s in v.sharings:
        rows = report(v, s)["orders"] if s != sharing else out["orders"]
        errs = [abs(r["mean_error"]) for r in rows.values()]
        ratio = [abs(r["ratio_error"]) for r in rows.values() if "ratio_error" in r]
        out["link_models"][s] = {"max_abs_mean_error": max(errs), "mean_abs_mean_error": sum(errs) / len(errs),
                                 "max_abs_ratio_error": max(ratio) if ratio else None}
    try:
        if trace_out:
            Path(trace_out).mkdir(parents=True, exist_ok=True)
            out["traces"] = {}
            for name, run in v.runs.items():
                path = Path(trace_out) / f"{name}.trace.json"
                skip = len(run.timeline.iterations) - len(run.measured)
                write_chrome_trace(run.timeline.frame(skip=skip), path, model=v.model,
                                   metadata={"generator": "dlsched validate (measured)", "order": name,
                                             "mode": v.mode, "hosts": v.hosts["note"]})
                out["traces"][name] = str(path)
        if plot:
            from dlsched.formats.validate_plot import write_validate_plot
            write_validate_plot(out, plot, fig12_points(v, sharing))
            out["plot"] = str(plot)
    except OSError as e:
        raise DlschedError(f"cannot write validate's output: {e}") from None
    return out


def fig12_points(v: Validation, sharing: str) -> list[tuple[float, float, str]]:
    """``(E of the replayed order, measured step time / fastest step time, order)`` per measured iteration."""
    from dlsched.analyses.multiworker_bounds import multiworker_bounds, rate
    b = multiworker_bounds(v.oracle.graph, v.oracle.times, v.workers)
    pts = []
    for name, run in v.runs.items():
        for t_rep, m in zip(run.replayed[sharing], run.measured):
            e = rate(t_rep, b.upper, b.lower).efficiency
            if e is not None:
                pts.append((e, m["iteration_time"], name))
    lo = min((t for _, t, _ in pts), default=1.0)
    return [(e, t / lo, n) for e, t, n in pts]


if __name__ == "__main__":
    sys.exit(_co_run(sys.argv[1]))
