"""``dlsched plan-cluster``: devices for a target speedup and parameter servers (paper 003 lemmas).

Each lemma is answered from its own inputs: Lemma 3.1 (devices, efficiency,
speedup) from ``--overhead-ratio`` with ``--target-speedup`` / ``--max-devices``,
inverted from ``--devices`` with ``--target-efficiency``; Lemma 3.2 (parameter
servers) from ``--param-bytes``, ``--workers``, ``--bandwidth`` and
``--compute-time``. A MODEL with ``--oracle`` supplies R_O, S_p and T_C.
"""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.analyses.orders import ALGORITHMS
from dlsched.planning.cluster_plan import DEFAULT_ROWS, SERVER_ASSUMPTIONS

from .common import (BANDWIDTH, BYTES, FRACTION, NONNEG_FLOAT, POSITIVE_DURATION, POSITIVE_FLOAT, POSITIVE_INT,
                     console, emit_json, fmt_bytes, fmt_seconds, key_value_table, load_graph, max_work_option,
                     model_options, oracle_options)


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
def plan_cluster(oracle, default_time, algo, trace_path, overhead_ratio, target_speedup, max_devices, devices,
                 target_efficiency, param_bytes, workers, bandwidth, compute_time, max_work, as_json, **model_kw):
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
    from dlsched.planning.cluster_plan import plan_cluster as answer

    graph = times = None
    if model_kw["model"] is not None:
        from dlsched.exporters.oracle_file import load_times

        if oracle is None:
            raise click.UsageError("MODEL needs --oracle: the time oracle that gives T_C and R_O")
        graph = load_graph(**model_kw)
        times = load_times(oracle, graph, default_time)
    plan = answer(overhead_ratio, target_speedup, max_devices, param_bytes, workers, bandwidth, compute_time, max_work,
                  devices, target_efficiency, graph, times, algo, trace_path)
    if as_json:
        emit_json(plan.to_dict())
        return
    if plan.inputs is not None:
        _print_inputs(plan)
    if plan.table is not None:
        _print_devices(plan)
    if plan.inverse is not None:
        _print_inverse(plan.inverse)
    if plan.parameter_servers is not None:
        console.print("parameter servers (Lemma 3.2, ⌈2·S_p·N_w / (B_ps·T_C)⌉): "
                      f"[bold]{plan.parameter_servers}[/]; assumes " + "; ".join(SERVER_ASSUMPTIONS))
    if plan.balance is not None:
        _print_balance(plan.balance)


def _print_inputs(plan):
    used = {**vars(plan.inputs), "overhead_ratio": plan.overhead_ratio, **(plan.server_inputs or {})}
    console.print(key_value_table("lemma inputs", [
        ("T_C compute time", f"{fmt_seconds(used['compute_time'])}  [dim]{plan.sources['compute_time']}[/]"),
        ("S_p parameter bytes", f"{fmt_bytes(used['param_bytes'])}  [dim]{plan.sources['param_bytes']}[/]"),
        ("iteration", f"{fmt_seconds(used['makespan'])}  [dim]{plan.inputs.sources['makespan']}[/]"),
        ("R_O overhead ratio", f"{used['overhead_ratio']:.4f}  [dim]{plan.sources['overhead_ratio']}[/]")]))


def _print_inverse(inverse):
    line = (f"largest overhead ratio for {inverse['target_efficiency']:.0%} efficiency on {inverse['devices']} "
            f"device(s) (Lemma 3.1 inverted): R_O = [bold]{inverse['overhead_ratio']:.4f}[/]")
    if inverse["met"] is not None:
        line += "; this model's R_O " + ("meets it" if inverse["met"] else "[bold red]exceeds it[/]")
    console.print(line)


def _print_balance(b):
    loads = ", ".join(f"{fmt_bytes(x)}" for x in b.loads)
    greedy = ", ".join(f"{fmt_bytes(x)}" for x in b.greedy_loads)
    console.print(f"bytes per server ({b.strategy}): {loads}; max/mean {b.imbalance:.2f}")
    console.print(f"bytes per server (greedy): {greedy}; max/mean {b.greedy_imbalance:.2f}")
    if b.uneven:
        console.print(f"[yellow]warning:[/] server {b.most_loaded} carries {b.imbalance:.2f}× the mean load under "
                      f"{b.strategy}, so every round waits for it and Lemma 3.2's even-load assumption fails; "
                      f"--ps-strategy greedy spreads the bytes to {b.greedy_imbalance:.2f}× the mean")


def _print_devices(plan):
    from rich.table import Table

    from dlsched.planning import cluster

    overhead_ratio, target_speedup, devices, limit, table = (plan.overhead_ratio, plan.target_speedup, plan.devices,
                                                             plan.speedup_limit, plan.table)
    console.print(f"[bold]scaling with overhead ratio R_O = {overhead_ratio:g}[/] (Lemma 3.1)")
    t = Table()
    t.add_column("devices", justify="right")
    t.add_column("efficiency", justify="right")
    t.add_column("speedup", justify="right")
    for r in table.itertuples():
        mark = " ←" if devices is not None and r.devices == devices else ""
        t.add_row(str(r.devices), f"{r.efficiency:.1%}", f"{r.speedup:.2f}×{mark}")
    console.print(t)
    console.print(f"speedup limit (G → ∞): 1 + 1/R_O = {limit:.4g}")
    if target_speedup is not None:
        if devices is None:
            console.print(f"target speedup {target_speedup:g}×: [bold red]unreachable[/] (must be below "
                          f"1 + 1/R_O = {limit:.4g})")
        else:
            console.print(f"target speedup {target_speedup:g}×: [bold]{devices}[/] device(s) "
                          f"(speedup {cluster.parallel_speedup(overhead_ratio, devices):.2f}×, "
                          f"efficiency {cluster.scaling_efficiency(overhead_ratio, devices):.1%})"
                          + ("" if devices <= len(table) else f"; the table stops at {len(table)}"))
