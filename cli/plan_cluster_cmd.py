"""``dlsched plan-cluster``: devices for a target speedup and parameter servers (paper 003 lemmas).

Each lemma is answered from its own inputs: Lemma 3.1 (devices, efficiency,
speedup) from ``--overhead-ratio`` with ``--target-speedup`` / ``--max-devices``;
Lemma 3.2 (parameter servers) from ``--param-bytes``, ``--workers``,
``--bandwidth`` and ``--compute-time``. Either set, or both.
"""
from __future__ import annotations

import click

from dlsched import limits

from .common import (BANDWIDTH, BYTES, NONNEG_FLOAT, POSITIVE_DURATION, POSITIVE_FLOAT, POSITIVE_INT, console,
                     emit_json, max_work_option)

DEFAULT_ROWS = 8  # rows of the scaling table when no target asks for more

NEEDS = ("plan-cluster answers two lemmas of paper 003 and needs the inputs of at least one: Lemma 3.1 "
         "(efficiency and devices for a target speedup) needs --overhead-ratio, with --target-speedup and/or "
         "--max-devices; Lemma 3.2 (parameter servers) needs --param-bytes, --workers, --bandwidth and "
         "--compute-time.")


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
    from dlsched.errors import DlschedError
    from dlsched.planning import cluster

    ps_args = {"--param-bytes": param_bytes, "--workers": workers, "--bandwidth": bandwidth,
               "--compute-time": compute_time}
    given = [k for k, v in ps_args.items() if v is not None]
    if overhead_ratio is None:
        strays = [k for k, v in (("--target-speedup", target_speedup), ("--max-devices", max_devices))
                  if v is not None]
        if strays:
            raise DlschedError(f"{' and '.join(strays)} {'belong' if len(strays) > 1 else 'belongs'} to Lemma 3.1, "
                               "which needs --overhead-ratio as well")
        if not given:
            raise DlschedError(NEEDS)
    if given:
        missing = [k for k, v in ps_args.items() if v is None]
        if missing:
            raise DlschedError(f"the parameter-server estimate (Lemma 3.2) needs {', '.join(missing)} as well as "
                               f"{', '.join(given)}")

    limit = devices = table = servers = None
    if overhead_ratio is not None:  # Lemma 3.1
        limit = cluster.speedup_limit(overhead_ratio)
        if target_speedup is not None:
            devices = cluster.devices_needed(overhead_ratio, target_speedup)
        rows = max_devices
        if rows is None:  # down to the target's row, unless that alone would be refused
            reach = max(DEFAULT_ROWS, devices or 0)
            rows = reach if reach <= (max_work or limits.CLUSTER_TABLE.limit) else DEFAULT_ROWS
        limits.check_work(limits.table_work(rows), limits.CLUSTER_TABLE, "plan-cluster's scaling table", max_work)
        table = cluster.scaling_table(overhead_ratio, rows)
    if given:  # Lemma 3.2
        servers = cluster.parameter_servers(param_bytes, workers, bandwidth, compute_time)

    if as_json:
        out = {}
        if table is not None:
            out.update(overhead_ratio=overhead_ratio, speedup_limit=limit, table=table.to_dict(orient="records"))
            if target_speedup is not None:
                out.update(target_speedup=target_speedup, devices=devices, reachable=devices is not None)
        if servers is not None:
            out["parameter_servers"] = servers
            out["parameter_server_inputs"] = {"param_bytes": param_bytes, "workers": workers,
                                              "bandwidth_bytes_per_s": bandwidth, "compute_time": compute_time}
        emit_json(out)
        return
    if table is not None:
        _print_devices(overhead_ratio, target_speedup, devices, limit, table)
    if servers is not None:
        console.print(f"parameter servers (Lemma 3.2, ⌈2·S_p·N_w / (B_ps·T_C)⌉): [bold]{servers}[/]")


def _print_devices(overhead_ratio, target_speedup, devices, limit, table):
    from rich.table import Table

    from dlsched.planning import cluster

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
