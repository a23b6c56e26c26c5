"""``dlsched order MODEL --algo tac -o prio.json``: a parameter-transfer priority file."""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.analyses.orders import ALGORITHMS

from .common import (NONNEG_FLOAT, SEED, column_table, console, emit_json, fmt_bytes, fmt_seconds, gather,
                     max_work_option, model_options, oracle_options, progress)

SHOWN = 10  # transfers listed in the summary table


def _choice(algo, seed, time_limit):
    from dlsched.answers.options import OrderChoice

    return OrderChoice(algo, seed=seed, time_limit=time_limit)


@click.command()
@model_options
@click.option("--algo", type=click.Choice(ALGORITHMS), required=True,
              help="tic (DAG only), tac (needs --oracle), random (seeded), topo/layer (first use), "
                   "exact (optimum for small graphs, needs --oracle).")
@oracle_options(required=False,
                oracle_help="Time oracle file (CSV or Parquet); needed by tac and exact, and to report makespans.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of --algo random and of the unordered baseline.")
@click.option("--time-limit", type=NONNEG_FLOAT, default=None,
              help="--algo exact: seconds to search (then any size is accepted).")
@gather("choice", _choice, ("algo", "seed", "time_limit"))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Priority file to write.")
@click.option("--format", "fmt", type=click.Choice(["json", "tictac"]), default="json", show_default=True,
              help="json (versioned, with the model fingerprint) or tictac (name<TAB>priority lines).")
@max_work_option(limits.EXACT)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def order(model, oracle, choice, output, fmt, max_work, as_json):
    """Write a priority file for MODEL's parameter transfers (TicTac §4).

    With --oracle, also simulates one iteration under the order and under an
    unordered (random) baseline, and reports their makespans and efficiency E.
    """
    from dlsched.answers.order import order as answer

    report = answer(model, oracle, choice, output, fmt, max_work, reporter=progress)
    out = report.to_dict(output, fmt)
    if as_json:
        emit_json(out)
        return
    transfers = report.priority_file.transfers
    rows = [(str(tr.priority), tr.name, fmt_bytes(tr.bytes), str(tr.ps)) for tr in transfers[:SHOWN]]
    if len(transfers) > SHOWN:
        rows.append(("…", f"{len(transfers) - SHOWN} more", "", ""))
    console.print(column_table(f"{report.model} ({report.mode}): {choice.algo} order, {len(transfers)} transfers",
                               ("priority", "transfer", "size", "ps"), rows, left=("transfer",)))
    if report.compared is not None:
        console.print(f"simulated makespan {fmt_seconds(out['makespan'])} (E = {out['efficiency']:.3f}); "
                      f"unordered baseline {fmt_seconds(out['unordered_makespan'])} "
                      f"(E = {out['unordered_efficiency']:.3f})")
    if "exact" in out:
        x = out["exact"]
        console.print(f"exact search: [bold]optimum proven[/] ({x['explored']:,} nodes, {x['seconds']:.1f} s)"
                      if x["proven"] else
                      f"exact search: [yellow]stopped at the time limit[/], optimum [bold]not proven[/]: best "
                      f"found {fmt_seconds(x['makespan'])}, proven lower bound {fmt_seconds(x['lower_bound'])} "
                      f"({x['explored']:,} nodes, {x['seconds']:.1f} s)")
    console.print(f"wrote [bold]{output}[/] ({fmt})")
