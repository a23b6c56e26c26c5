"""``dlsched simulate MODEL --oracle O``: simulated iterations under a transfer order, or data-parallel collectives.

Two answers under one command: :mod:`dlsched.answers.simulate` (parameter
servers) and, with ``--collective`` or ``--compare allreduce,solo,majority``,
:mod:`dlsched.answers.collectives`.
"""
from __future__ import annotations

from dataclasses import replace

import click

from dlsched import limits
from dlsched.analyses.links import DEFAULT_SHARING, LINK_POLICIES
from dlsched.analyses.orders import ORDERS
from dlsched.answers.options import OrderChoice
from dlsched.answers.simulate import Outputs, Run

from .common import (NONNEG_FLOAT, POSITIVE_INT, SEED, emit_json, exclusive, gather, max_work_option, model_options,
                     oracle_options, progress)
from .simulate_views import collective_options, print_collectives, print_orders


@click.command()
@model_options(required=False)
@oracle_options(required=False)
@click.option("--priorities", type=click.Path(dir_okay=False), default=None,
              help="Priority file (from dlsched order) to enforce.")
@click.option("--algo", type=click.Choice(ORDERS), default=None,
              help="Compute the order here; unordered: random per worker and iteration [default: unordered].")
@click.option("--workers", type=POSITIVE_INT, default=1, show_default=True, help="Workers sharing the servers' links.")
@click.option("--iterations", type=POSITIVE_INT, default=1, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seeds random orders and jitter.")
@click.option("--jitter", type=NONNEG_FLOAT, default=0.0, show_default=True,
              help="Lognormal sigma of per-op multiplicative noise, per worker and iteration (0: none).")
@click.option("--sharing", type=click.Choice(list(LINK_POLICIES)), default=DEFAULT_SHARING, show_default=True,
              help="serial: one transfer at a time per link; fair: one stream per worker, capacity split.")
@click.option("--time-limit", type=NONNEG_FLOAT, default=None,
              help="--algo exact: seconds to search (then any size is accepted).")
@gather("order", OrderChoice, ("algo", "priorities", "seed", "time_limit"))
@click.option("--trace-out", "trace", type=click.Path(dir_okay=False), default=None,
              help="Write every iteration's timeline as Chrome-trace JSON (Perfetto, chrome://tracing; "
                   "dlsched bounds --trace rates it).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a Gantt chart PNG of the first iteration.")
@click.option("--color-by", type=click.Choice(["priority", "kind"]), default="priority", show_default=True,
              help="Gantt colours: transfers by priority rank, or every op by kind.")
@gather("outputs", Outputs, ("trace", "plot", "color_by"))
@click.option("--compare", default=None, help="Orders to compare side by side, e.g. tic,tac,random,topo.")
@gather("run", Run, ("workers", "iterations", "jitter", "sharing", "compare"))  # --compare parsed below
@max_work_option(limits.SIMULATE, limits.EXACT)
@collective_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def simulate(model, oracle, order, run, outputs, max_work, collective, as_json):
    """Simulate MODEL's iterations under a transfer order (DESIGN §4.6).

    Prints the makespan and scheduling efficiency E; with several workers or
    iterations also the iteration time and the straggler share (mean, p50, p95).
    The order comes from --priorities, or --algo (default: unordered).
    --collective (or --compare allreduce,solo,majority) simulates data-parallel
    all-reduce instead (DESIGN §4.8): free-running processes, --imbalance
    injected per step; throughput, NAP, staleness and missed updates.
    Work beyond --max-work op-steps (ops × workers × iterations, per order
    compared) is refused before it starts; long runs show a progress bar.
    """
    from dlsched.analyses.allreduce_sim import parse_collectives
    from dlsched.analyses.compare import check_simulate_work, parse_orders

    exclusive(priorities=order.priorities, algo=order.algo)
    kinds = _compare(parse_collectives, run.compare)
    if kinds or collective.asked:
        exclusive(collective=collective.kind, compare=kinds)
        if collective.step.time is not None and model.given:
            raise click.UsageError("give either MODEL (with --oracle) or --step-time, not both")
        if order.priorities or order.algo or outputs.trace or outputs.plot:
            raise click.UsageError("--priorities, --algo, --trace-out and --plot are for parameter servers; "
                                   "the all-reduce collectives take none of them")
        return _collectives(model, oracle, kinds or [collective.kind or "allreduce"], run, order.seed, collective,
                            max_work, as_json)
    run = replace(run, compare=_compare(parse_orders, run.compare))
    check_simulate_work(None, run.workers, run.iterations, run.compare, max_work)  # absurd options, before loading
    _need_model(model, oracle)
    from dlsched.answers.simulate import simulate as answer

    report = answer(model, oracle, replace(order, algo=order.algo or "unordered"), run, outputs, max_work, progress)
    if as_json:
        emit_json(report.figures | report.detail)
        return
    print_orders(report)


def _collectives(model, oracle, kinds, run, seed, collective, max_work, as_json):
    from dlsched.answers.collectives import Comparison, collectives

    if collective.step.time is None:
        _need_model(model, oracle)
    comparison = Comparison(kinds, run.workers, run.iterations, collective.imbalance, collective.activation, seed)
    with progress("simulating collectives", unit="steps") as bar:
        out = collectives(model, oracle, comparison, collective.step, collective.network, max_work, bar)
    return emit_json(out) if as_json else print_collectives(out)


def _compare(parse, text):
    """--compare read by ``parse``; its complaint is a usage error of --compare."""
    from dlsched.errors import DlschedError

    try:
        return parse(text)
    except DlschedError as e:
        raise click.BadParameter(str(e), param_hint="--compare") from None


def _need_model(model, oracle) -> None:
    if not model.given or not oracle.given:
        raise click.UsageError("MODEL and --oracle are needed (or --step-time SECONDS with --collective).")
