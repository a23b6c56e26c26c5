"""``dlsched plan-cluster``: devices for a target speedup and parameter servers (paper 003 lemmas)."""
from __future__ import annotations

import click

from .common import console, emit_json


@click.command("plan-cluster")
@click.option("--overhead-ratio", "overhead_ratio", required=True, type=float,
              help="R_O = T_O / T_C: overhead that cannot be hidden behind computation, over computation time.")
@click.option("--target-speedup", type=float, default=None, help="Speedup wanted over one device.")
@click.option("--max-devices", type=click.IntRange(min=1), default=None,
              help="Rows of the efficiency table [default: 8, or enough to reach the target].")
@click.option("--param-bytes", default=None, help="S_p: parameter bytes per round, e.g. 180MB (for parameter servers).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="N_w: workers (for parameter servers).")
@click.option("--bandwidth", default=None, help="B_ps: bandwidth per parameter server, e.g. 10Gbps.")
@click.option("--compute-time", default=None, help="T_C: one round of computation on a worker, e.g. 0.5s.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def plan_cluster(overhead_ratio, target_speedup, max_devices, param_bytes, workers, bandwidth, compute_time, as_json):
    """Efficiency and speedup by device count, devices needed for a target
    speedup, and parameter servers needed to hide transfers (paper 003,
    Lemmas 3.1 and 3.2).

    Efficiency with G devices is (1 + R_O) / (1 + G·R_O); speedup G times that.
    Parameter servers: ceil(2·S_p·N_w / (B_ps·T_C)), given all of --param-bytes,
    --workers, --bandwidth and --compute-time.
    """
    from dlsched.errors import DlschedError
    from dlsched.planning import cluster
    from dlsched.units import parse_bandwidth, parse_bytes, parse_duration

    limit = cluster.speedup_limit(overhead_ratio)
    devices = None
    if target_speedup is not None:
        devices = cluster.devices_needed(overhead_ratio, target_speedup)
    rows = max_devices or max(8, devices or 0)
    table = cluster.scaling_table(overhead_ratio, rows)

    ps_args = {"--param-bytes": param_bytes, "--workers": workers, "--bandwidth": bandwidth,
               "--compute-time": compute_time}
    given = [k for k, v in ps_args.items() if v is not None]
    servers = None
    if given:
        missing = [k for k, v in ps_args.items() if v is None]
        if missing:
            raise DlschedError(f"the parameter-server estimate needs {', '.join(missing)} as well as "
                               f"{', '.join(given)}")
        servers = cluster.parameter_servers(parse_bytes(param_bytes), workers, parse_bandwidth(bandwidth),
                                            parse_duration(compute_time))

    if as_json:
        out = {"overhead_ratio": overhead_ratio, "speedup_limit": limit,
               "table": table.to_dict(orient="records")}
        if target_speedup is not None:
            out["target_speedup"] = target_speedup
            out["devices"] = devices
            out["reachable"] = devices is not None
        if servers is not None:
            out["parameter_servers"] = servers
            out["parameter_server_inputs"] = {"param_bytes": parse_bytes(param_bytes), "workers": workers,
                                              "bandwidth_bytes_per_s": parse_bandwidth(bandwidth),
                                              "compute_time": parse_duration(compute_time)}
        emit_json(out)
        return

    from rich.table import Table

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
                          f"(speedup {cluster.speedup(overhead_ratio, devices):.2f}×, "
                          f"efficiency {cluster.efficiency(overhead_ratio, devices):.1%})")
    if servers is not None:
        console.print(f"parameter servers (Lemma 3.2, ⌈2·S_p·N_w / (B_ps·T_C)⌉): [bold]{servers}[/]")
