"""``dlsched simulate MODEL --oracle O``: simulated iterations under a transfer order, or data-parallel collectives."""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.analyses.links import DEFAULT_SHARING, LINK_POLICIES
from dlsched.analyses.orders import ORDERS

from .common import (NONNEG_FLOAT, POSITIVE_INT, SEED, emit_json, exclusive, load_graph, max_work_option,
                     model_options, oracle_options, progress)
from .simulate_views import collective_options, print_collectives, print_orders


@click.command()
@model_options(required=False)
@oracle_options(required=False)
@click.option("--priorities", "priority_path", type=click.Path(dir_okay=False), default=None,
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
@click.option("--trace-out", type=click.Path(dir_okay=False), default=None,
              help="Write every iteration's timeline as Chrome-trace JSON (Perfetto, chrome://tracing; "
                   "dlsched bounds --trace rates it).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a Gantt chart PNG of the first iteration.")
@click.option("--color-by", type=click.Choice(["priority", "kind"]), default="priority", show_default=True,
              help="Gantt colours: transfers by priority rank, or every op by kind.")
@click.option("--compare", default=None, help="Orders to compare side by side, e.g. tic,tac,random,topo.")
@max_work_option(limits.SIMULATE, limits.EXACT)
@collective_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def simulate(oracle, default_time, rescale_batch, priority_path, algo, workers, iterations, seed, jitter, sharing,
             time_limit, trace_out, plot, color_by, compare, max_work, as_json, collective, step_time, imbalance,
             bucket_mb, gradient_size, algorithm, latency, bandwidth, activation, **model_kw):
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
    from dlsched.analyses.collectives_report import collectives_report, parse_collectives
    from dlsched.analyses.compare import parse_orders
    from dlsched.analyses.simulate_report import check_simulate_work, simulate_report
    from dlsched.errors import DlschedError
    from dlsched.formats.priority_file import read_priority_file

    exclusive(priorities=priority_path, algo=algo)
    try:
        kinds = parse_collectives(compare)
    except DlschedError as e:
        raise click.BadParameter(str(e), param_hint="--compare") from None
    if kinds or collective or step_time is not None or imbalance is not None:
        exclusive(collective=collective, compare=kinds)
        if step_time is not None and model_kw["model"]:
            raise click.UsageError("give either MODEL (with --oracle) or --step-time, not both")
        if priority_path or algo or trace_out or plot:
            raise click.UsageError("--priorities, --algo, --trace-out and --plot are for parameter servers; "
                                   "the all-reduce collectives take none of them")
        graph = times = None
        if step_time is None:
            graph, times = _model(oracle, default_time, rescale_batch, model_kw)
        with progress("simulating collectives", unit="steps") as bar:
            out = collectives_report(kinds or [collective or "allreduce"], workers, iterations, imbalance,
                                     step_time=step_time, gradient_bytes=gradient_size, graph=graph, times=times,
                                     bucket_bytes=int(bucket_mb * 1024**2), latency=latency, bandwidth=bandwidth,
                                     algorithm=algorithm, activation=activation, seed=seed, max_work=max_work,
                                     progress=bar)
        return emit_json(out) if as_json else print_collectives(out)
    try:
        compare = parse_orders(compare)
    except DlschedError as e:
        raise click.BadParameter(str(e), param_hint="--compare") from None
    check_simulate_work(None, workers, iterations, compare, max_work)  # absurd options, before the model loads
    graph, times = _model(oracle, default_time, rescale_batch, model_kw)
    given = read_priority_file(priority_path, graph) if priority_path else None
    report = simulate_report(graph, times, algo or "unordered", given, compare, workers, iterations, seed, jitter,
                             sharing, time_limit, max_work, keep_timeline=bool(trace_out or plot), reporter=progress)
    out = dict(report.figures)
    # The exporters write atomically and report an unwritable path themselves (OutputError, exit 2).
    if trace_out:
        from dlsched.formats.chrome_trace import write_chrome_trace

        write_chrome_trace(report.run.timeline, trace_out, model=graph.name,
                           metadata={"algorithm": out["algorithm"], "makespan_s": out["makespan"],
                                     "efficiency": out["efficiency"], "workers": workers})
        out["trace"] = trace_out
        if "iteration" in report.run.timeline.columns:
            out["trace_iterations"] = int(report.run.timeline["iteration"].nunique())
    if plot:
        from dlsched.formats.gantt import plot_gantt

        tl = report.run.timeline
        first = tl[tl["iteration"] == tl["iteration"].min()] if "iteration" in tl.columns else tl
        plot_gantt(first, plot, model=graph.name, order=out["algorithm"],
                   makespan=report.run.first_makespan, efficiency=report.first_efficiency, color_by=color_by)
        out["plot"] = plot
    if as_json:
        emit_json(out | report.detail)
        return
    print_orders(out, report)


def _model(oracle, default_time, rescale_batch, model_kw):
    from dlsched.profiling.oracle_times import load_times

    if not model_kw["model"] or not oracle:
        raise click.UsageError("MODEL and --oracle are needed (or --step-time SECONDS with --collective).")
    graph = load_graph(**model_kw)
    return graph, load_times(oracle, graph, default_time, rescale_batch=rescale_batch)
