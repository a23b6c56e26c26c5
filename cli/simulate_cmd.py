"""``dlsched simulate MODEL --oracle O``: simulated iterations under a transfer order."""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.analyses.orders import ORDERS

from .common import (NONNEG_FLOAT, POSITIVE_INT, SEED, column_table, console, emit_json, exclusive, fmt_seconds,
                     key_value_table, load_graph, max_work_option, model_options, oracle_options, progress)


@click.command()
@model_options
@oracle_options(required=True)
@click.option("--priorities", "priority_path", type=click.Path(dir_okay=False), default=None,
              help="Priority file (from dlsched order) to enforce.")
@click.option("--algo", type=click.Choice(ORDERS), default=None,
              help="Compute the order here; unordered: random per worker and iteration [default: unordered].")
@click.option("--workers", type=POSITIVE_INT, default=1, show_default=True, help="Workers sharing the servers' links.")
@click.option("--iterations", type=POSITIVE_INT, default=1, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seeds random orders and jitter.")
@click.option("--jitter", type=NONNEG_FLOAT, default=0.0, show_default=True,
              help="Lognormal sigma of per-op multiplicative noise, per worker and iteration (0: none).")
@click.option("--sharing", type=click.Choice(["serial", "fair"]), default="serial", show_default=True,
              help="serial: one transfer at a time per link; fair: one stream per worker, capacity split.")
@click.option("--time-limit", type=NONNEG_FLOAT, default=None,
              help="--algo exact: seconds to search (then any size is accepted).")
@click.option("--trace-out", type=click.Path(dir_okay=False), default=None,
              help="Write the (first iteration's) timeline as Chrome-trace JSON (Perfetto, chrome://tracing).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="Write a Gantt chart PNG.")
@click.option("--color-by", type=click.Choice(["priority", "kind"]), default="priority", show_default=True,
              help="Gantt colours: transfers by priority rank, or every op by kind.")
@click.option("--compare", default=None, help="Orders to compare side by side, e.g. tic,tac,random,topo.")
@max_work_option(limits.SIMULATE, limits.EXACT)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def simulate(oracle, default_time, rescale_batch, priority_path, algo, workers, iterations, seed, jitter, sharing,
             time_limit, trace_out, plot, color_by, compare, max_work, as_json, **model_kw):
    """Simulate MODEL's iterations under a transfer order (DESIGN §4.6).

    Prints the makespan and scheduling efficiency E; with several workers or
    iterations also the iteration time and the straggler share (mean, p50, p95).
    The order comes from --priorities, or --algo (default: unordered).
    Work beyond --max-work op-steps (ops × workers × iterations, per order
    compared) is refused before it starts; long runs show a progress bar.
    """
    from dlsched.analyses.compare import parse_orders
    from dlsched.analyses.simulate_report import check_simulate_work, simulate_report
    from dlsched.errors import DlschedError
    from dlsched.exporters.oracle_file import load_times
    from dlsched.exporters.priority_file import read_priority_file

    exclusive(priorities=priority_path, algo=algo)
    try:
        compare = parse_orders(compare)
    except DlschedError as e:
        raise click.BadParameter(str(e), param_hint="--compare") from None
    check_simulate_work(None, workers, iterations, compare, max_work)  # absurd options, before the model loads
    graph = load_graph(**model_kw)
    times = load_times(oracle, graph, default_time, rescale_batch=rescale_batch)
    given = read_priority_file(priority_path, graph) if priority_path else None
    report = simulate_report(graph, times, algo or "unordered", given, compare, workers, iterations, seed, jitter,
                             sharing, time_limit, max_work, keep_timeline=bool(trace_out or plot), reporter=progress)
    out = dict(report.figures)
    # The exporters write atomically and report an unwritable path themselves (OutputError, exit 2).
    if trace_out:
        from dlsched.exporters.chrome_trace import write_chrome_trace

        write_chrome_trace(report.run.timeline, trace_out, model=graph.name,
                           metadata={"algorithm": out["algorithm"], "makespan_s": out["makespan"],
                                     "efficiency": out["efficiency"], "workers": workers})
        out["trace"] = trace_out
    if plot:
        from dlsched.exporters.gantt import plot_gantt

        plot_gantt(report.run.timeline, plot, model=graph.name, order=out["algorithm"],
                   makespan=report.run.first_makespan, efficiency=report.first_efficiency, color_by=color_by)
        out["plot"] = plot
    if as_json:
        emit_json(out | report.detail)
        return
    _print(out, report)


def _print(out, report):
    from dlsched.analyses.compare import RANDOM_SEEDS

    multi = report.multi
    rows = [("makespan" + (" (mean iteration time)" if multi else ""), fmt_seconds(out["makespan"])),
            ("efficiency E", f"{out['efficiency']:.3f}"),
            ("efficiency against L_dep", f"{out['dependency_efficiency']:.3f}"),
            ("upper bound U (serial)", fmt_seconds(out["upper"])),
            ("lower bound L (busiest resource)", fmt_seconds(out["lower"])),
            ("dependency-aware lower bound L_dep", fmt_seconds(out["dependency_lower"])),
            ("best possible speedup S", f"{out['speedup']:.3f}"),
            ("ops / transfers / servers", f"{out['ops']:,} / {out['transfers']:,} / {out['parameter_servers']}")]
    if multi:
        it, sh = out["iteration_time"], out["straggler_share"]
        rows += [("workers × iterations", f"{out['workers']} × {out['iterations']}  ({out['sharing']} links, "
                                          f"jitter {out['jitter']:g})"),
                 ("iteration time mean / p50 / p95",
                  f"{fmt_seconds(it['mean'])} / {fmt_seconds(it['p50'])} / {fmt_seconds(it['p95'])}"),
                 ("straggler share mean / p50 / p95", f"{sh['mean']:.1%} / {sh['p50']:.1%} / {sh['p95']:.1%}")]
    console.print(key_value_table(f"{out['model']} ({out['mode']}) · order: {out['algorithm']}", rows))
    if multi:
        console.print(column_table("per worker (mean over iterations)",
                                   ("worker", "makespan", "efficiency", "waits for slowest"),
                                   [(str(r["worker"]), fmt_seconds(r["makespan"]), f"{r['efficiency']:.3f}",
                                     fmt_seconds(r["wait"])) for r in report.run.per_worker]))
    if "compare" in out:
        mean = any(r["algorithm"] == "random" for r in out["compare"])
        console.print(column_table("orders compared" + (f" (random: mean of {RANDOM_SEEDS} seeds)" if mean else ""),
                                   ("order", "makespan", "efficiency E", "straggler share"),
                                   [(r["algorithm"], fmt_seconds(r["makespan"]), f"{r['efficiency']:.3f}",
                                     f"{r['straggler_share']:.1%}") for r in out["compare"]], left=("order",)))
    if report.below_serial:
        console.print("E < 0: the workers share the servers' links, so an iteration can take longer than one "
                      "worker's fully serial bound U (E is measured against the single-worker bounds).")
    for key, what in (("trace", "Chrome trace"), ("plot", "Gantt chart")):
        if key in out:
            console.print(f"wrote {what} to [bold]{out[key]}[/]")
