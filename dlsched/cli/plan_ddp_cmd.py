"""``dlsched plan-ddp MODEL --oracle O --workers P``: DDP's bucket cap for a model, and the ordered all-reduce's verdict."""
from __future__ import annotations

import click

from dlsched import limits

from .common import (BANDWIDTH, emit_json, exclusive, gather, link_options, max_work_option, model_options,
                     oracle_options)


def _link(workers, bandwidth, latency, measure_network, algorithm, network_timeout):
    from dlsched.answers.plan_ddp import Link

    exclusive(measure_network=measure_network, bandwidth=bandwidth)
    exclusive(measure_network=measure_network, latency=latency)
    return Link(workers, bandwidth, latency, measure_network, algorithm, network_timeout)


def _sweep(caps, piece_bytes, priority, copy_bandwidth):
    from dlsched.answers.plan_ddp import Sweep
    from dlsched.errors import DlschedError
    from dlsched.units import parse_bytes, parse_list

    try:
        cap_list = parse_list(caps, float, "--caps", "bucket caps in MiB, e.g. 1,5,25,100")
        pieces = parse_list(piece_bytes, parse_bytes, "--piece-bytes", "piece sizes, e.g. 256KiB,1MiB,4MiB")
    except DlschedError as e:
        raise click.BadParameter(str(e)) from None
    return Sweep(tuple(cap_list) if cap_list else None, tuple(pieces) if pieces else None, priority,
                 copy_bandwidth)


@click.command("plan-ddp")
@model_options
@oracle_options(required=True)
@click.option("--workers", type=click.IntRange(min=2), required=True, help="DDP processes (world size).")
@link_options
@click.option("--algorithm", type=click.Choice(["ring", "recursive-doubling"]), default="ring", show_default=True,
              help="The all-reduce's algorithm (gloo and NCCL: ring).")
@gather("link", _link, ("workers", "bandwidth", "latency", "measure_network", "algorithm", "network_timeout"))
@click.option("--caps", default=None,
              help="bucket_cap_mb values to sweep, in MiB, e.g. 1,5,25,100 [default: 1, 2, 4, … MiB up to the "
                   "whole model]; DDP's default (25, first bucket 1) is always tried.")
@click.option("--piece-bytes", default=None,
              help="The ordered all-reduce's piece sizes, e.g. 256KiB,1MiB,4MiB [default: 256KiB, 1, 4, 16 MiB "
                   "and the whole model].")
@click.option("--priority", type=click.Choice(["tic", "topo", "ready"]), default="tic", show_default=True,
              help="The ordered all-reduce's priorities: TIC, the order of first use, or backward's ready order.")
@click.option("--copy-bandwidth", type=BANDWIDTH, default="10GB/s", show_default=True,
              help="Memory copy rate: DDP's gradient copies (gradient_as_bucket_view=False) and plain SGD's "
                   "optimizer (3 bytes moved per parameter byte).")
@gather("sweep", _sweep, ("caps", "piece_bytes", "priority", "copy_bandwidth"))
@click.option("--write-order", type=click.Path(dir_okay=False), default=None,
              help="Write the ordered all-reduce's schedule at its best piece size (JSON, for its hook).")
@max_work_option(limits.PLAN_DDP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def plan_ddp(model, oracle, link, sweep, write_order, max_work, as_json):
    """The bucket_cap_mb to pass to DistributedDataParallel for MODEL, and why (DESIGN §4.8).

    Simulates one process's DDP step in steady state (buckets all-reduced one
    at a time in launch order, overlapping the rest of backward; the optimizer;
    the next forward) at a sweep of bucket caps, with the step time and E of
    each; recommends the fastest, keeping DDP's default within 1%; says
    whether the step is compute-, latency- or bandwidth-bound. Then the
    ordered all-reduce (pieces issued in TIC order, each parameter updated as
    its pieces arrive, the next forward waiting only for its own parameters):
    its best piece size, its gain over the recommended setting, TicTac's S,
    and whether it pays.
    """
    from dlsched.answers.plan_ddp import plan_ddp as answer

    from .plan_ddp_views import print_plan

    out = answer(model, oracle, link, sweep, write_order, max_work)
    if as_json:
        emit_json(out)
        return
    print_plan(out)
