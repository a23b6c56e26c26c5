"""``dlsched plan-cluster``: devices for a target speedup and parameter servers (paper 003 lemmas).

Each lemma is answered from its own inputs: Lemma 3.1 (devices, efficiency,
speedup) from ``--overhead-ratio`` with ``--target-speedup`` / ``--max-devices``;
Lemma 3.2 (parameter servers) from ``--param-bytes``, ``--workers``,
``--bandwidth`` and ``--compute-time``. Either set, or both.
"""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.planning.cluster_plan import DEFAULT_ROWS

from .common import (BANDWIDTH, BYTES, NONNEG_FLOAT, POSITIVE_DURATION, POSITIVE_FLOAT, POSITIVE_INT, console,
                     emit_json, max_work_option)


@click.command("plan-cluster")
@click.option("--overhead-ratio", "overhead_ratio", type=NONNEG_FLOAT, default=None,
              help="Lemma 3.1: R_O = T_O / T_C, overhead that cannot be hidden behind computation, over "
                   "computation time.")
@click.option("--target-speedup", type=POSITIVE_FLOAT, default=None,
              help="Lemma 3.1: speedup wanted over one device.")
@click.option("--max-devices", type=POSITIVE_INT, default=None,
              help=f"Lemma 3.1: rows of the efficiency table [default: {DEFAULT_ROWS}, or enough to reach the "
                   "target].")
@click.option("--param-bytes", type=BYTES, default=None,
              help="Lemma 3.2: S_p, parameter bytes per round, e.g. 180MB.")
@click.option("--workers", type=POSITIVE_INT, default=None, help="Lemma 3.2: N_w, workers.")
@click.option("--bandwidth", type=BANDWIDTH, default=None, help="Lemma 3.2: B_ps, bandwidth per server, e.g. 10Gbps.")
@click.option("--compute-time", type=POSITIVE_DURATION, default=None,
              help="Lemma 3.2: T_C, one round of computation on a worker, e.g. 0.5s.")
@max_work_option(limits.CLUSTER_TABLE)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def plan_cluster(overhead_ratio, target_speedup, max_devices, param_bytes, workers, bandwidth, compute_time, max_work,
                 as_json):
    """Efficiency and speedup by device count, devices needed for a target
    speedup, and parameter servers needed to hide transfers (paper 003,
    Lemmas 3.1 and 3.2); each lemma from its own inputs.

    Lemma 3.1 (--overhead-ratio): efficiency with G devices is
    (1 + R_O) / (1 + G·R_O); speedup G times that. Lemma 3.2: parameter
    servers ceil(2·S_p·N_w / (B_ps·T_C)), from --param-bytes, --workers,
    --bandwidth and --compute-time.
    """
    from dlsched.planning.cluster_plan import plan_cluster as answer

    plan = answer(overhead_ratio, target_speedup, max_devices, param_bytes, workers, bandwidth, compute_time, max_work)
    if as_json:
        emit_json(plan.to_dict())
        return
    if plan.table is not None:
        _print_devices(plan)
    if plan.parameter_servers is not None:
        console.print("parameter servers (Lemma 3.2, ⌈2·S_p·N_w / (B_ps·T_C)⌉): "
                      f"[bold]{plan.parameter_servers}[/]")


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
