"""The ``profile`` answer: its options checked before anything loads, then the model's oracle built and written.

The checks come first and in this order, so that a mistake is reported at
once: a ``--peer`` without ``--measure-network``, a number of runs above the
work budget (before the model loads), a malformed ``--peer``, two sources of
times, a bad device spec, a ``.dag.json`` with nothing to run. Then the model
loads, the runs are checked against its compute ops, and
:func:`~dlsched.profiling.oracle.build_oracle` times it (DESIGN §3).

Examples
--------
>>> built = profile(ModelSpec("examples/torch_models.py:small_cnn"), Timing(analytic=True, device_spec="h100"))
>>> built.device, built.network["source"], built.result.untimed
('analytic:h100', 'device spec h100', {})
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dlsched import limits
from dlsched.errors import DlschedError
from dlsched.profiling.network import parse_peer
from dlsched.profiling.oracle import BuiltOracle, build_oracle, runnable_format
from dlsched.profiling.schema import check_threads

from .options import ModelSpec


@dataclass(frozen=True)
class Timing:
    """Where the compute times come from.

    Attributes
    ----------
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
    default_time : float, optional
        Seconds for compute ops that could not be timed.
    min_coverage : float
        With ``trace``: the least share of the trace's compute time its matched ops must hold
        (0 to 1); below it the trace is refused and nothing is written.
    """

    device: str = "cpu"
    runs: int = 5
    warmup: int = 1
    threads: int = 1
    trace: str | None = None
    analytic: bool = False
    device_spec: str = "cpu"
    default_time: float | None = None
    min_coverage: float = 0.8  # trace_import.MIN_COVERAGE


@dataclass(frozen=True)
class Link:
    """The link of the transfers.

    ``bandwidth`` (bytes/s) and ``latency`` (s) ``None``: the device spec's
    with ``Timing.analytic``, else the defaults of
    :func:`~dlsched.profiling.oracle.build_oracle`. ``measure``: measure it
    instead, to a ``dlsched net-peer`` at ``peer`` (``HOST:PORT``) or to a
    local peer process, any wait bounded by ``timeout`` seconds.
    """

    bandwidth: float | None = None
    latency: float | None = None
    measure: bool = False
    peer: str | None = None
    timeout: float = 30.0


def profile(model: ModelSpec, timing: Timing = Timing(), link: Link = Link(), output: str | None = None,
            max_work: int | None = None, say: Callable[[str], Any] | None = None,
            progress: Callable[[str], Any] | None = None) -> BuiltOracle:
    """Load MODEL and build its time oracle as ``dlsched profile`` does; with ``output``, write it there.

    Parameters
    ----------
    model : ModelSpec
    timing : Timing
    link : Link
    output : str, optional
        The oracle file: CSV, or Parquet when it ends in ``.parquet``.
    max_work : int, optional
        Op runs allowed (:data:`dlsched.limits.PROFILE`).
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
    """
    t, peer = timing, link.peer
    if peer and not link.measure:
        raise DlschedError("--peer needs --measure-network")
    check_threads(t.threads)
    runs_model = not (t.trace or t.analytic)  # only then do runs and warm-up run anything
    if runs_model:  # before the model loads: --runs 1000000000 is refused at once
        limits.check_work(limits.profile_work(None, t.runs, t.warmup), limits.PROFILE, "profile", max_work)
    peer_addr = parse_peer(peer) if peer else None
    if t.analytic and t.trace:
        raise DlschedError("--analytic and --from-trace are two different sources of times; give one")
    spec = None
    if t.analytic:
        from dlsched.profiling.device_specs import load_device_spec

        spec = load_device_spec(t.device_spec)
    if runs_model:
        runnable_format(model.path)
    graph = model.load()
    if runs_model:
        limits.check_work(limits.profile_work(len(graph.compute_ops()), t.runs, t.warmup), limits.PROFILE, "profile",
                          max_work)

    def measure():
        from dlsched.profiling import network as net

        if say:
            say(f"measuring the network to {peer or 'a local peer process'} …")
        return (net.measure_peer(*peer_addr, timeout=link.timeout) if peer_addr
                else net.measure_local(timeout=link.timeout))

    built = build_oracle(graph, spec=spec, trace=t.trace, model=model.path if runs_model else None, device=t.device,
                         runs=t.runs, warmup=t.warmup, bandwidth=link.bandwidth, latency=link.latency,
                         measure=measure if link.measure else None, default_time=t.default_time, progress=progress,
                         threads=t.threads, min_coverage=t.min_coverage if t.trace else None)
    if output is not None:
        from dlsched.formats.oracle_file import write_oracle

        write_oracle(built.result.frame, output, meta=built.meta())
    return built
