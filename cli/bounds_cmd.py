"""``dlsched bounds MODEL --oracle O``: makespan bounds U, L, speedup S, and efficiency E."""
from __future__ import annotations

import click

from .common import (console, duration_option, emit_json, exclusive, fmt_seconds, key_value_table, load_graph,
                     model_options, oracle_options)


@click.command()
@model_options
@oracle_options(required=True)
@click.option("--makespan", callback=duration_option, default=None,
              help="A measured iteration time (e.g. 0.35 or 350ms) to rate with the efficiency E.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="A measured Chrome trace (JSON); its span of complete events is the makespan.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def bounds(oracle, default_time, rescale_batch, makespan, trace_path, as_json, **model_kw):
    """Makespan bounds of MODEL under a time oracle (TicTac §3.2).

    U runs every op one after another; L keeps the busiest resource always
    busy; S = (U − L) / L is the most any transfer order can gain. With
    --makespan or --trace, also the scheduling efficiency E = (U − m) / (U − L).
    Beside L, the dependency-aware lower bound L_dep (sends wait for the
    backward, which waits for the recvs) and the efficiency against it,
    (U − m) / (U − L_dep): near 1 means no order can do much better.
    """
    from dlsched.analyses.bounds import bounds as compute_bounds
    from dlsched.analyses.bounds import rate_makespan, trace_makespan
    from dlsched.analyses.dependency_bound import dependency_bound
    from dlsched.exporters.oracle_file import load_times

    exclusive(makespan=makespan, trace=trace_path)
    graph = load_graph(**model_kw)
    times = load_times(oracle, graph, default_time, rescale_batch=rescale_batch)
    b, dep = compute_bounds(graph, times), dependency_bound(graph, times)
    if trace_path:
        makespan = trace_makespan(trace_path)
    out = {"model": graph.name, "mode": graph.mode, "upper": b.upper, "lower": b.lower, "speedup": b.speedup,
           "loads": dict(b.loads), "dependency_lower": dep.lower, "dependency_resource": dep.resource,
           "critical_path": dep.critical_path}
    if makespan is not None:
        rating, dep_rating = rate_makespan(b.upper, b.lower, makespan), rate_makespan(b.upper, dep.lower, makespan)
        out.update(makespan=makespan, efficiency=rating.efficiency, model_error=rating.model_error,
                   dependency_efficiency=dep_rating.efficiency)
    if as_json:
        emit_json(out)
        return
    from rich.table import Table

    rows = [("upper bound U (all serial)", fmt_seconds(b.upper)),
            ("lower bound L (busiest resource)", fmt_seconds(b.lower)),
            ("dependency-aware lower bound L_dep", f"{fmt_seconds(dep.lower)}  (binding: {dep.resource})"),
            ("best-case speedup S", f"{b.speedup:.3f}  ({b.speedup * 100:.1f}%)")]
    if makespan is not None:
        rows.append(("makespan" + (" (trace)" if trace_path else ""), fmt_seconds(makespan)))
        rows.append(("scheduling efficiency E", f"{rating.efficiency:.3f}" if rating.efficiency is not None
                     else "— (model error, see below)"))
        if dep_rating.efficiency is not None:
            rows.append(("efficiency against L_dep", f"{dep_rating.efficiency:.3f}"))
    t = key_value_table(f"{graph.name} ({graph.mode}): makespan bounds", rows)
    console.print(t)
    loads = Table(title="load per resource", title_justify="left")
    for col in ("resource", "ops", "load", "share of U"):
        loads.add_column(col, justify="left" if col == "resource" else "right")
    for row in b.frame().itertuples(index=False):
        loads.add_row(row.resource, f"{row.ops:,}", fmt_seconds(row.load), f"{row.share * 100:.1f}%")
    console.print(loads)
    if makespan is not None and rating.efficiency is None:
        side = "above U" if rating.model_error > 0 else "below L"
        console.print(f"[yellow]model error:[/] the makespan lies {fmt_seconds(abs(rating.model_error))} {side}, "
                      "outside [L, U], so no efficiency is given: the oracle's times and the measured iteration "
                      "do not describe the same run (other device, batch or overheads)")
