"""``dlsched plan-fsdp MODEL --oracle O --workers P [--memory M]``: FSDP2 units, reshards and prefetch for a model."""
from __future__ import annotations

import click

from dlsched import limits

from .common import (BANDWIDTH, BYTES, FRACTION, emit_json, exclusive, gather, link_options, max_work_option,
                     model_options, oracle_options)


def _link(workers, bandwidth, latency, measure_network, network_timeout):
    from dlsched.answers.plan_ddp import Link

    exclusive(measure_network=measure_network, bandwidth=bandwidth)
    exclusive(measure_network=measure_network, latency=latency)
    return Link(workers, bandwidth, latency, measure_network, "ring", network_timeout)


def _options(memory, units, optimizer, copy_bandwidth, margin):
    from dlsched.answers.plan_fsdp import FsdpOptions

    names = None
    if units is not None:
        names = tuple(u.strip() for u in units.split(","))
        if not all(names):
            raise click.BadParameter(f"--units takes module paths separated by commas, e.g. layers.0,layers.1; "
                                     f"got {units!r}")
    return FsdpOptions(memory, names, optimizer, copy_bandwidth, margin)


@click.command("plan-fsdp")
@model_options
@oracle_options(required=True)
@click.option("--workers", type=click.IntRange(min=2), required=True, help="FSDP processes (world size).")
@click.option("--memory", type=BYTES, default=None,
              help="Memory budget per process, e.g. 2GiB [default: none, the fastest plan].")
@click.option("--units", default=None,
              help="Module paths to make fully_shard units, e.g. layers.0,layers.1 [default: every module depth "
                   "with two or more, tried in turn].")
@link_options
@gather("link", _link, ("workers", "bandwidth", "latency", "measure_network", "network_timeout"))
@click.option("--optimizer", type=click.Choice(["sgd", "momentum", "adam"]), default="sgd", show_default=True,
              help="Optimizer state kept per parameter shard (memory).")
@click.option("--copy-bandwidth", type=BANDWIDTH, default="10GB/s", show_default=True,
              help="Memory copy rate: all-gather copy-out, reduce-scatter copy-in, plain SGD's update.")
@click.option("--margin", type=FRACTION, default="0.1", show_default=True,
              help="Share of --memory the plan leaves free (a real peak moves from run to run): 0.1 or 10%.")
@gather("options", _options, ("memory", "units", "optimizer", "copy_bandwidth", "margin"))
@click.option("--write-plan", type=click.Path(dir_okay=False), default=None,
              help="Write the plan (JSON) for dlsched.hooks.fsdp.apply_plan in the training script.")
@max_work_option(limits.PLAN_FSDP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def plan_fsdp(model, oracle, link, options, write_plan, max_work, as_json):
    """FSDP2's units, reshard_after_forward and prefetch lists for MODEL, under a memory budget (DESIGN §4.10).

    Simulates one process's FSDP2 step on CPU (all-gathers before each
    unit's forward and backward, reduce-scatters after its backward, at the
    points torch 2.13 issues them) for FSDP2's default and for every
    candidate: units kept unsharded after forward in the order backward
    needs them, and async all-gathers prefetched 1 or 2 units ahead. Prints
    the default's and the plan's step time and peak memory per process.
    """
    from dlsched.answers.plan_fsdp import plan_fsdp as answer

    from .plan_fsdp_views import print_plan

    out = answer(model, oracle, link, options, write_plan, max_work)
    if as_json:
        emit_json(out)
        return
    print_plan(out)
