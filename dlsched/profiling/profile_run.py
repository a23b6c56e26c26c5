"""``dlsched profile``'s work: its options checked before anything loads, then the model's oracle built.

The checks come first and in this order, so that a mistake is reported at
once: a ``--peer`` without ``--measure-network``, a number of runs above the
work budget (before the model loads), a malformed ``--peer``, two sources of
times, a bad device spec, a ``.dag.json`` with nothing to run. Then the model
loads, the runs are checked against its compute ops, and
:func:`~dlsched.profiling.oracle.build_oracle` times it.
"""
from __future__ import annotations

from typing import Any, Callable

from dlsched import limits
from dlsched.dag import Graph
from dlsched.errors import DlschedError

from .oracle import BuiltOracle, build_oracle, runnable_format
from .schema import check_threads


def parse_peer(peer: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) → ``(host, port)``.

    Examples
    --------
    >>> parse_peer("127.0.0.1:29555"), parse_peer("[::1]:80")
    (('127.0.0.1', 29555), ('::1', 80))
    """
    host, _, port = peer.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DlschedError(f"--peer {peer!r}: expected HOST:PORT, e.g. 127.0.0.1:29555")
    return host.strip("[]"), int(port)


def profile_model(model: str, *, mode: str | None = None, batch: int | None = None, ps: int | None = None,
                  ps_strategy: str | None = None, buffers: bool = False, device: str = "cpu", runs: int = 5,
                  warmup: int = 1, threads: int = 1, trace: str | None = None, analytic: bool = False,
                  device_spec: str = "cpu", bandwidth: float | None = None, latency: float | None = None,
                  measure_network: bool = False, peer: str | None = None, network_timeout: float = 30.0,
                  default_time: float | None = None, max_work: int | None = None,
                  load: Callable[..., Graph] | None = None,
                  say: Callable[[str], Any] | None = None, progress: Callable[[str], Any] | None = None) -> BuiltOracle:
    """Load MODEL and build its time oracle as ``dlsched profile`` does (DESIGN §3).

    Parameters
    ----------
    model : str
        The MODEL argument; ``mode`` … ``buffers`` load it.
    device, runs, warmup
        Where and how often the framework profiler runs the model.
    threads : int
        The framework's intra-op threads while it runs the model (recorded in
        the oracle). 1 by default: on a shared machine, more threads make each
        op's time depend on the machine's other load.
    trace : str, optional
        Take compute times from this trace instead of running the model.
    analytic : bool
        Estimate compute times with the roofline of ``device_spec`` instead.
    bandwidth, latency : float, optional
        The link of the transfers; ``None``: the device spec's with
        ``analytic``, else the defaults of :func:`~dlsched.profiling.oracle.build_oracle`.
    measure_network, peer, network_timeout
        Measure the link instead: to a ``dlsched net-peer`` at ``peer``
        (``HOST:PORT``), or to a local peer process.
    default_time : float, optional
        Seconds for compute ops that could not be timed.
    max_work : int, optional
        Op runs allowed (:data:`dlsched.limits.PROFILE`).
    load : callable, optional
        Loads the model, called as :func:`dlsched.importers.loader.load_model` (the
        default) with ``model`` … ``buffers``; a command passes its own loader.
    say : callable, optional
        Called with a line before a long wait (the network measurement).
    progress : callable, optional
        Opens the profiler's progress report (see ``build_oracle``).

    Returns
    -------
    BuiltOracle

    Raises
    ------
    DlschedError
        Options that contradict each other or exceed the work budget, a
        model that cannot be loaded or timed, a dead peer.

    Examples
    --------
    >>> built = profile_model("examples/torch_models.py:small_cnn", analytic=True, device_spec="h100")
    >>> built.device, built.network["source"], built.result.untimed
    ('analytic:h100', 'device spec h100', {})
    """
    if peer and not measure_network:
        raise DlschedError("--peer needs --measure-network")
    check_threads(threads)
    runs_model = not (trace or analytic)  # only then do runs and warm-up run anything
    if runs_model:  # before the model loads: --runs 1000000000 is refused at once
        limits.check_work(limits.profile_work(None, runs, warmup), limits.PROFILE, "profile", max_work)
    peer_addr = parse_peer(peer) if peer else None
    if analytic and trace:
        raise DlschedError("--analytic and --from-trace are two different sources of times; give one")
    spec = None
    if analytic:
        from .device_specs import load_device_spec

        spec = load_device_spec(device_spec)
    if runs_model:
        runnable_format(model)
    if load is None:
        from dlsched.importers.loader import load_model as load
    graph = load(model=model, mode=mode, batch=batch, ps=ps, ps_strategy=ps_strategy, buffers=buffers)
    if runs_model:
        limits.check_work(limits.profile_work(len(graph.compute_ops()), runs, warmup), limits.PROFILE, "profile",
                          max_work)

    def measure():
        from . import network as net

        if say:
            say(f"measuring the network to {peer or 'a local peer process'} …")
        return (net.measure_peer(*peer_addr, timeout=network_timeout) if peer_addr
                else net.measure_local(timeout=network_timeout))

    return build_oracle(graph, spec=spec, trace=trace, model=model if runs_model else None, device=device,
                        runs=runs, warmup=warmup, bandwidth=bandwidth, latency=latency,
                        measure=measure if measure_network else None, default_time=default_time, progress=progress,
                        threads=threads)
