"""``dlsched validate MODEL``: a real cluster (parameter servers per order, DDP per bucket cap, FSDP2 per plan),
predicted against measured."""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.answers import validate as answer

from .common import BYTES, POSITIVE_INT, SEED, emit_json, err_console, gather, max_work_option
from .validate_views import render


def _names(text: str) -> tuple[str, ...]:
    """``random, tac`` → ``("random", "tac")``: the comma-separated --orders, blanks dropped."""
    return tuple(o.strip() for o in text.split(",") if o.strip())


def _caps(text: str | None) -> tuple[float, ...] | None:
    """``1,5,25`` → ``(1.0, 5.0, 25.0)``: the comma-separated --caps in MiB."""
    if text is None:
        return None
    try:
        return tuple(float(c) for c in _names(text))
    except ValueError:
        raise click.BadParameter(f"takes bucket caps in MiB separated by commas, got {text!r}",
                                 param_hint="--caps") from None


def _workload(model, mode, batch):
    """--mode left at its default is unset: the parameter-server cluster infers, DDP trains."""
    from click.core import ParameterSource
    ctx = click.get_current_context(silent=True)
    explicit = ctx is None or ctx.get_parameter_source("mode") is not ParameterSource.DEFAULT
    return answer.Workload(model, mode if explicit else None, batch)


@click.command()
@click.argument("model")
@click.option("--dp", type=click.Choice(["ps", "ddp", "fsdp"]), default="ps", show_default=True,
              help="ps: a parameter-server cluster per transfer order; ddp: torch's DistributedDataParallel per "
                   "bucket cap; fsdp: FSDP2's default against plan-fsdp's plan (both training).")
@click.option("--mode", type=click.Choice(["inference", "training"]), default="inference", show_default=True,
              help="With --dp ps; --dp ddp trains.")
@click.option("--batch", type=POSITIVE_INT, default=8, show_default=True, help="Samples per worker and iteration.")
@click.option("--workers", type=POSITIVE_INT, default=2, show_default=True)
@click.option("--servers", type=POSITIVE_INT, default=1, show_default=True)
@click.option("--rate", default="auto", show_default=True,
              help="The server link's tc rate (1gbit, 500mbit), or auto: the link's load equals a worker's compute.")
@click.option("--orders", default="random,topo,tic,tac", show_default=True,
              help="Orders to run; random is the unordered baseline the throughput ratios divide by.")
@click.option("--iterations", type=POSITIVE_INT, default=20, show_default=True,
              help="Measured iterations per order, after the warm-up (the orders run interleaved in one job).")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Warm-up iterations per order, run first and dropped.")
@click.option("--threads", type=POSITIVE_INT, default=1, show_default=True,
              help="Intra-op threads per process, in the cluster and in the profile.")
@click.option("--network", type=click.Choice(["auto", "netns", "localhost"]), default="auto", show_default=True,
              help="auto: network namespaces with a tc-shaped link as root, else localhost (unshaped).")
@click.option("--sharing", type=click.Choice(["serial", "fair"]), default=None,
              help="Link model of the tables [default: the simulator's]; every model is compared below them.")
@click.option("--caps", default=None,
              help="With --dp ddp: bucket_cap_mb values to run, in MiB, comma-separated [default: 1, 2, 4, ... MiB "
                   "up to the whole model]; DDP's default is always run too.")
@click.option("--memory", type=BYTES, default=None,
              help="With --dp fsdp: the plan's memory budget per process, e.g. 2GiB [default: none].")
@click.option("--units", default=None,
              help="With --dp fsdp: module paths to make fully_shard units [default: plan-fsdp's choice].")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--trace-out", type=click.Path(file_okay=False), default=None,
              help="Folder for each order's measured Chrome trace (ORDER.trace.json; dlsched bounds --trace).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="PNG of predicted against measured, with the replayed-order fit (TicTac Fig. 12a).")
@max_work_option(limits.CLUSTER, limits.RANKS)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@gather("workload", _workload, ("model", "mode", "batch"))
@gather("cluster", answer.Cluster, ("workers", "servers", "rate", "network", "threads"))
@gather("schedule", lambda orders, caps, units, memory, **run: answer.Schedule(
    _names(orders), caps=_caps(caps), memory_bytes=memory, units=_names(units) if units else None, **run),
        ("orders", "iterations", "warmup", "seed", "dp", "caps", "memory", "units"))
@gather("outputs", answer.Outputs, ("sharing", "trace_out", "plot"))
def validate(workload, cluster, schedule, outputs, max_work, as_json):
    """Run MODEL on a real cluster and compare with the simulator: parameter servers per order (DESIGN §4.7).

    As root the ranks run in network namespaces with the server's link shaped
    by tc; otherwise on plain localhost, and the output says so. The simulator
    uses an in-situ oracle: compute profiled with the cluster's threads per
    process, transfers from a gloo measurement of the same link. Per order it
    prints measured and predicted mean and p95 iteration time with the error,
    throughput over random (with 95% bootstrap intervals, and a verdict line:
    the predicted ratio within, outside or undecided against ±0.05 of the
    measured one), straggler share and the efficiency E.

    With --dp ddp it trains MODEL with torch's DistributedDataParallel at each
    bucket cap, interleaved one step each, and prints per cap the measured and
    predicted step time (DESIGN §4.8), and plan-ddp's pick against the best cap.
    With --dp fsdp, FSDP2's default against plan-fsdp's plan: step time and
    peak memory per process, measured and predicted (DESIGN §4.10).
    """
    say = (lambda line: err_console.print(f"[dim]validate:[/] {line}")) if not as_json else (lambda line: None)
    out = answer.validate(workload, cluster, schedule, outputs, max_work=max_work, say=say)
    if as_json:
        emit_json(out)
    else:
        render(out)
