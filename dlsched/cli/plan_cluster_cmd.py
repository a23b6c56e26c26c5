"""``dlsched plan-cluster``: devices, overhead ratio and parameter servers (paper 003 lemmas); the answer is
:func:`dlsched.answers.plan_cluster.plan_cluster`'s."""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.analyses.orders import ALGORITHMS
from dlsched.answers.plan_cluster import DEFAULT_ROWS, SERVER_ASSUMPTIONS, Scaling, Servers

from .common import (BANDWIDTH, BYTES, FRACTION, NONNEG_FLOAT, POSITIVE_DURATION, POSITIVE_FLOAT, POSITIVE_INT,
                     console, emit_json, fmt_bytes, fmt_seconds, gather, key_value_table, max_work_option,
                     model_options, need_oracle, oracle_options)


@click.command("plan-cluster")
@model_options(required=False)
@oracle_options(required=False, oracle_help="With MODEL: the time oracle that gives T_C and R_O.")
@click.option("--algo", type=click.Choice(ALGORITHMS), default="tac", show_default=True,
              help="With MODEL: the transfer order of the simulated iteration that gives R_O.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="With MODEL: a measured Chrome trace whose span gives R_O instead of the simulation.")
@click.option("--overhead-ratio", "overhead_ratio", type=NONNEG_FLOAT, default=None,
              help="Lemma 3.1: R_O = T_O / T_C, overhead that cannot be hidden behind computation, over "
                   "computation time.")
@click.option("--target-speedup", type=POSITIVE_FLOAT, default=None,
              help="Lemma 3.1: speedup wanted over one device.")
@click.option("--max-devices", type=POSITIVE_INT, default=None,
              help=f"Lemma 3.1: rows of the efficiency table [default: {DEFAULT_ROWS}, or enough to reach the "
                   "target].")
@click.option("--devices", type=POSITIVE_INT, default=None,
              help="Lemma 3.1 inverted: G, with --target-efficiency, for the largest R_O that keeps it.")
@click.option("--target-efficiency", type=FRACTION, default=None,
              help="Lemma 3.1 inverted: α wanted with --devices, e.g. 0.8 or 80%.")
@click.option("--param-bytes", type=BYTES, default=None,
              help="Lemma 3.2: S_p, parameter bytes per round, e.g. 180MB.")
@click.option("--workers", type=POSITIVE_INT, default=None, help="Lemma 3.2: N_w, workers.")
@click.option("--bandwidth", type=BANDWIDTH, default=None, help="Lemma 3.2: B_ps, bandwidth per server, e.g. 10Gbps.")
@click.option("--compute-time", type=POSITIVE_DURATION, default=None,
              help="Lemma 3.2: T_C, one round of computation on a worker, e.g. 0.5s.")
@max_work_option(limits.CLUSTER_TABLE)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@gather("scaling", Scaling, ("overhead_ratio", "target_speedup", "max_devices", "devices", "target_efficiency"))
@gather("servers", Servers, ("param_bytes", "workers", "bandwidth", "compute_time"))
def plan_cluster(model, oracle, algo, trace_path, scaling, servers, max_work, as_json):
    """Efficiency and speedup by device count, devices needed for a target
    speedup, the largest overhead ratio for a target efficiency, and parameter
    servers needed to hide transfers (paper 003, Lemmas 3.1 and 3.2).

    Lemma 3.1 (--overhead-ratio): efficiency with G devices is
    (1 + R_O) / (1 + G·R_O); speedup G times that. Lemma 3.2: parameter
    servers ceil(2·S_p·N_w / (B_ps·T_C)), from --param-bytes, --workers,
    --bandwidth and --compute-time. A MODEL with --oracle supplies R_O, S_p
    and T_C (a figure given by hand wins) and, with --ps 2 or more, shows how
    evenly its parameters spread over the servers.
    """
    from dlsched.answers.plan_cluster import plan_cluster as answer

    need_oracle(model, oracle, "the time oracle that gives T_C and R_O")
    if trace_path is not None and not model.given:
        raise click.UsageError("--trace gives R_O from a measured iteration of MODEL: give MODEL with --oracle "
                               "too (without MODEL, give --overhead-ratio).")
    plan = answer(model, oracle, scaling, servers, algo, trace_path, max_work)
    if as_json:
        emit_json(plan.to_dict())
        return
    if plan.inputs is not None:
        used = {**vars(plan.inputs), "overhead_ratio": plan.overhead_ratio, **(plan.server_inputs or {})}
        console.print(key_value_table("lemma inputs", [
            (label, f"{fmt(used[key])}  [dim]{plan.sources[key]}[/]") for label, key, fmt in (
                ("T_C compute time", "compute_time", fmt_seconds), ("S_p parameter bytes", "param_bytes", fmt_bytes),
                ("iteration", "makespan", fmt_seconds), ("R_O overhead ratio", "overhead_ratio", "{:.4f}".format))]))
    if plan.table is not None:
        _print_devices(plan)
    if plan.inverse is not None:
        inv = plan.inverse
        console.print(f"largest overhead ratio for {inv['target_efficiency']:.0%} efficiency on {inv['devices']} "
                      f"device(s) (Lemma 3.1 inverted): R_O = [bold]{inv['overhead_ratio']:.4f}[/]"
                      + ("" if inv["met"] is None else "; this model's R_O "
                         + ("meets it" if inv["met"] else "[bold red]exceeds it[/]")))
    if plan.parameter_servers is not None:
        console.print("parameter servers (Lemma 3.2, ⌈2·S_p·N_w / (B_ps·T_C)⌉): "
                      f"[bold]{plan.parameter_servers}[/]; assumes " + "; ".join(SERVER_ASSUMPTIONS))
    if plan.balance is not None:
        b = plan.balance
        for name, loads, ratio in ((b.strategy, b.loads, b.imbalance), ("greedy", b.greedy_loads, b.greedy_imbalance)):
            console.print(f"bytes per server ({name}): {', '.join(map(fmt_bytes, loads))}; max/mean {ratio:.2f}")
        if b.uneven:
            console.print(f"[yellow]warning:[/] server {b.most_loaded} carries {b.imbalance:.2f}× the mean load "
                          f"under {b.strategy}, so every round waits for it and Lemma 3.2's even-load assumption "
                          f"fails; --ps-strategy greedy spreads the bytes to {b.greedy_imbalance:.2f}× the mean")


def _print_devices(plan):
    from rich.table import Table

    from dlsched.planning import cluster

    R, target, devices, limit, table = plan.overhead_ratio, plan.target_speedup, plan.devices, plan.speedup_limit, \
        plan.table
    console.print(f"[bold]scaling with overhead ratio R_O = {R:g}[/] (Lemma 3.1)")
    t = Table()
    for col in ("devices", "efficiency", "speedup"):
        t.add_column(col, justify="right")
    for r in table.itertuples():
        t.add_row(str(r.devices), f"{r.efficiency:.1%}", f"{r.speedup:.2f}×" + (" ←" if r.devices == devices else ""))
    console.print(t)
    console.print(f"speedup limit (G → ∞): 1 + 1/R_O = {limit:.4g}")
    if target is not None and devices is None:
        console.print(f"target speedup {target:g}×: [bold red]unreachable[/] (must be below 1 + 1/R_O = {limit:.4g})")
    elif target is not None:
        console.print(f"target speedup {target:g}×: [bold]{devices}[/] device(s) (speedup "
                      f"{cluster.parallel_speedup(R, devices):.2f}×, efficiency "
                      f"{cluster.scaling_efficiency(R, devices):.1%})"
                      + ("" if devices <= len(table) else f"; the table stops at {len(table)}"))
