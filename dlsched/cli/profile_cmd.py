"""``dlsched profile MODEL -o oracle.csv``: the per-op time oracle (DESIGN §3).

Compute ops are timed by the framework profiler of MODEL's format (or read
from ``--from-trace``); every recv/send gets ``latency + bytes / bandwidth``
(defaults ``--bandwidth 10Gbps --latency 50us``, or ``--measure-network``).
Ops that TensorFlow ran inside another op's fused kernel get time 0 and are
listed as "fused into X" (X holds the kernel's time). Ops that could not be
timed are named with the reason; without
``--default-time`` the oracle is still written (exit 0, with a warning) and
the analyses will refuse it until they are given ``--default-time``.
"""
from __future__ import annotations

import functools

import click

from dlsched import limits
from dlsched.devices import DEVICES

from .common import (BANDWIDTH, DURATION, NONNEG_INT, POSITIVE_INT, FiniteFloat, emit_json, err_console, gather,
                     max_work_option, model_options, progress)
from .profile_views import print_report


def _timing(**options):
    from dlsched.answers.profile import Timing

    return Timing(**options)


def _link(bandwidth, latency, measure_network, peer, network_timeout):
    from dlsched.answers.profile import Link

    return Link(bandwidth, latency, measure_network, peer, network_timeout)


@click.command()
@model_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="oracle.csv", show_default=True,
              help="Oracle file to write: CSV, or Parquet when it ends in .parquet.")
@click.option("--device", type=click.Choice(list(DEVICES)), default="cpu", show_default=True)
@click.option("--runs", type=POSITIVE_INT, default=5, show_default=True,
              help="Timed runs per op (the minimum is kept, the median stored).")
@click.option("--warmup", type=NONNEG_INT, default=1, show_default=True, help="Untimed runs first.")
@click.option("--threads", type=POSITIVE_INT, default=1, show_default=True,
              help="Intra-op threads of the framework (recorded in the oracle). 1: on a shared machine more threads "
                   "make op times depend on its other load; give the cores a worker will own to time ops as it runs.")
# No click default: unset, the link is --device-spec's with --analytic, else dlsched.profiling.network's default.
@click.option("--bandwidth", type=BANDWIDTH, default=None,
              help="Link bandwidth for transfers: bps/Kbps/Mbps/Gbps, B/s, MB/s, MiB/s …  [default: 10Gbps]")
@click.option("--latency", type=DURATION, default=None, help="Per-transfer latency: s, ms, us, ns.  [default: 50us]")
@click.option("--measure-network", is_flag=True,
              help="Measure bandwidth and latency with a real gloo transfer to another process instead.")
@click.option("--peer", metavar="HOST:PORT", default=None,
              help="With --measure-network: measure to a 'dlsched net-peer' there instead of a local process.")
@click.option("--network-timeout", type=FiniteFloat(min=0.5), default=30.0, show_default=True,
              help="Seconds any wait of the network measurement may take.")
@click.option("--from-trace", "trace", type=click.Path(dir_okay=False), default=None,
              help="Take compute times from a PyTorch profiler Chrome trace or a TF timeline instead of running.")
@click.option("--min-coverage", type=FiniteFloat(min=0.0, max=1.0), default=0.8, show_default=True,
              help="With --from-trace: refuse the trace (exit 2, nothing written) when the model's ops match less "
                   "than this share of its compute time (GPU compute kernels, or host ops in a CPU trace).")
@click.option("--analytic", is_flag=True,
              help="Estimate times from shapes with a roofline model instead of running the model (deterministic).")
@click.option("--device-spec", default="cpu", show_default=True,
              help="With --analytic: cpu, a100, h100, or a YAML spec file; transfers use its network.")
@click.option("--default-time", type=DURATION, default=None,
              help="Give ops that could not be timed this time (e.g. 10us).")
@gather("timing", _timing, ("device", "runs", "warmup", "threads", "trace", "analytic", "device_spec", "default_time",
                            "min_coverage"))
@gather("link", _link, ("bandwidth", "latency", "measure_network", "peer", "network_timeout"))
@max_work_option(limits.PROFILE)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def profile(model, timing, link, output, max_work, as_json):
    """Build MODEL's time oracle: Time(op) for every op, written to -o.

    Compute ops run on --device with the framework's profiler (warm-up, then
    --runs runs; minimum kept, median stored; ops whose runs varied are named),
    or come from --from-trace; transfers cost latency + bytes/bandwidth. The
    oracle records its batch, mode, device and threads: analyses refuse it at
    another. Ops that cannot be timed are listed with why; the analyses then
    need --default-time (or pass it here). More than --max-work op runs
    (compute ops × (runs + warm-up)) are refused before anything runs.
    """
    from dlsched.answers.profile import profile as answer

    built = answer(model, timing, link, output, max_work, say=None if as_json else err_console.print,
                   progress=functools.partial(progress, unit="runs"))
    info = {"output": str(output), **built.to_dict()}
    if as_json:
        emit_json(info)
        return
    print_report(info, built.result, built.graph)

