"""``dlsched order MODEL --algo tac -o prio.json``: a parameter-transfer priority file."""
from __future__ import annotations

import click

from dlsched import limits

from .common import (NONNEG_FLOAT, SEED, console, emit_json, fmt_bytes, fmt_seconds, load_graph, max_work_option,
                     model_options, oracle_options, progress)

SHOWN = 10  # transfers listed in the summary table


@click.command()
@model_options
@click.option("--algo", type=click.Choice(["tic", "tac", "random", "topo", "layer", "exact"]), required=True,
              help="tic (DAG only), tac (needs --oracle), random (seeded), topo/layer (first use), "
                   "exact (optimum for small graphs, needs --oracle).")
@oracle_options(required=False,
                oracle_help="Time oracle file (CSV or Parquet); needed by tac and exact, and to report makespans.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of --algo random and of the unordered baseline.")
@click.option("--time-limit", type=NONNEG_FLOAT, default=None,
              help="--algo exact: seconds to search (then any size is accepted).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Priority file to write.")
@click.option("--format", "fmt", type=click.Choice(["json", "tictac"]), default="json", show_default=True,
              help="json (versioned, with the model fingerprint) or tictac (name<TAB>priority lines).")
@max_work_option(limits.EXACT)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def order(algo, oracle, default_time, seed, time_limit, output, fmt, max_work, as_json, **model_kw):
    """Write a priority file for MODEL's parameter transfers (TicTac §4).

    With --oracle, also simulates one iteration under the order and under an
    unordered (random) baseline, and reports their makespans and efficiency E.
    """
    from dlsched.analyses.orders import NEEDS_TIMES, compute_order
    from dlsched.errors import DlschedError
    from dlsched.exporters.priority_file import make_priority_file, write_priority_file

    if algo in NEEDS_TIMES and oracle is None:
        raise DlschedError(f"--algo {algo} needs a time oracle: pass --oracle oracle.csv (make one with "
                           "dlsched profile), or use --algo tic, which needs only the graph")
    graph = load_graph(**model_kw)
    times = oracle_hash = None
    if oracle is not None:
        from dlsched.exporters.oracle_file import load_times
        from dlsched.exporters.oracle_file import oracle_hash as hash_times

        times = load_times(oracle, graph, default_time)
        oracle_hash = hash_times(times)
    limit = f" (at most {time_limit:g} s)" if time_limit is not None else ""
    with progress(f"searching the {algo} order of {graph.name}{limit}", unit="search nodes") as bar:
        priorities = compute_order(graph, algo, times=times, seed=seed, time_limit=time_limit, max_work=max_work,
                                   progress=bar)
    pf = make_priority_file(graph, priorities, algo, oracle_hash)
    try:
        write_priority_file(pf, output, fmt)
    except OSError as e:
        raise DlschedError(f"{output}: cannot write the priority file ({e})") from None

    out = {"model": graph.name, "mode": graph.mode, "algorithm": algo, "transfers": len(pf.transfers),
           "distinct_priorities": len({t.priority for t in pf.transfers}), "output": str(output), "format": fmt,
           "oracle": oracle_hash, "makespan": None, "efficiency": None}
    if times is not None:
        from dlsched.analyses.bounds import bounds
        from dlsched.analyses.simulate import simulate

        b = bounds(graph, times)
        ordered = simulate(graph, times, priorities, seed=seed).makespan
        baseline = simulate(graph, times, None, seed=seed).makespan
        out.update(makespan=ordered, efficiency=b.schedule_efficiency(ordered), unordered_makespan=baseline,
                   unordered_efficiency=b.schedule_efficiency(baseline), upper=b.upper, lower=b.lower)
    if as_json:
        emit_json(out)
        return
    from rich.table import Table

    t = Table(title=f"{graph.name} ({graph.mode}): {algo} order, {len(pf.transfers)} transfers",
              title_justify="left")
    for col in ("priority", "transfer", "size", "ps"):
        t.add_column(col, justify="left" if col == "transfer" else "right")
    for tr in pf.transfers[:SHOWN]:
        t.add_row(str(tr.priority), tr.name, fmt_bytes(tr.bytes), str(tr.ps))
    if len(pf.transfers) > SHOWN:
        t.add_row("…", f"{len(pf.transfers) - SHOWN} more", "", "")
    console.print(t)
    if times is not None:
        console.print(f"simulated makespan {fmt_seconds(out['makespan'])} (E = {out['efficiency']:.3f}); "
                      f"unordered baseline {fmt_seconds(out['unordered_makespan'])} "
                      f"(E = {out['unordered_efficiency']:.3f})")
    console.print(f"wrote [bold]{output}[/] ({fmt})")
