"""The ``plan-cluster`` answer: each of paper ``003_*``'s lemmas that its inputs allow.

Lemma 3.1 (devices, efficiency, speedup) needs the overhead ratio; Lemma 3.2
(parameter servers) needs the parameter bytes, workers, bandwidth and compute
time. A user may give either set, or both, but not half of one: a stray input
is an error rather than silently ignored. The formulas are in
:mod:`dlsched.planning.cluster`.

Examples
--------
>>> plan = plan_cluster(overhead_ratio=0.1, target_speedup=3)
>>> plan.devices, len(plan.table), plan.parameter_servers is None
(4, 8, True)
>>> plan_cluster(param_bytes=180e6, workers=4, bandwidth=10e9 / 8, compute_time=0.5).parameter_servers
3
"""
from __future__ import annotations

from dataclasses import dataclass

from dlsched import limits
from dlsched.errors import DlschedError

from . import cluster

DEFAULT_ROWS = 8  # rows of the scaling table when no target asks for more

NEEDS = ("plan-cluster answers two lemmas of paper 003 and needs the inputs of at least one: Lemma 3.1 "
         "(efficiency and devices for a target speedup) needs --overhead-ratio, with --target-speedup and/or "
         "--max-devices; Lemma 3.2 (parameter servers) needs --param-bytes, --workers, --bandwidth and "
         "--compute-time.")


@dataclass(frozen=True)
class ClusterPlan:
    """What :func:`plan_cluster` answers; a lemma whose inputs were not given leaves its fields ``None``.

    Attributes
    ----------
    overhead_ratio, target_speedup : float or None
        Lemma 3.1's inputs.
    speedup_limit : float or None
        ``1 + 1/R_O``, the speedup no device count reaches.
    devices : int or None
        Devices for ``target_speedup``; ``None`` when no target was given or it is unreachable.
    table : pandas.DataFrame or None
        ``devices, efficiency, speedup`` per device count.
    parameter_servers : int or None
        Lemma 3.2's server count.
    server_inputs : dict or None
        Lemma 3.2's inputs, in bytes, bytes/s and seconds.
    """

    overhead_ratio: float | None = None
    target_speedup: float | None = None
    speedup_limit: float | None = None
    devices: int | None = None
    table: object = None
    parameter_servers: int | None = None
    server_inputs: dict | None = None

    def to_dict(self) -> dict:
        """The JSON form: only the lemmas that were answered."""
        out: dict = {}
        if self.table is not None:
            out.update(overhead_ratio=self.overhead_ratio, speedup_limit=self.speedup_limit,
                       table=self.table.to_dict(orient="records"))
            if self.target_speedup is not None:
                out.update(target_speedup=self.target_speedup, devices=self.devices,
                           reachable=self.devices is not None)
        if self.parameter_servers is not None:
            out["parameter_servers"] = self.parameter_servers
            out["parameter_server_inputs"] = self.server_inputs
        return out


def _check_inputs(overhead_ratio, target_speedup, max_devices, server_args: dict) -> bool:
    """Refuse half a lemma's inputs; return whether Lemma 3.2 was asked for."""
    given = [k for k, v in server_args.items() if v is not None]
    if overhead_ratio is None:
        strays = [k for k, v in (("--target-speedup", target_speedup), ("--max-devices", max_devices))
                  if v is not None]
        if strays:
            raise DlschedError(f"{' and '.join(strays)} {'belong' if len(strays) > 1 else 'belongs'} to Lemma 3.1, "
                               "which needs --overhead-ratio as well")
        if not given:
            raise DlschedError(NEEDS)
    if given:
        missing = [k for k, v in server_args.items() if v is None]
        if missing:
            raise DlschedError(f"the parameter-server estimate (Lemma 3.2) needs {', '.join(missing)} as well as "
                               f"{', '.join(given)}")
    return bool(given)


def plan_cluster(overhead_ratio: float | None = None, target_speedup: float | None = None,
                 max_devices: int | None = None, param_bytes: float | None = None, workers: int | None = None,
                 bandwidth: float | None = None, compute_time: float | None = None,
                 max_work: int | None = None) -> ClusterPlan:
    """Answer Lemma 3.1 and/or Lemma 3.2 from whichever complete set of inputs is given.

    Parameters
    ----------
    overhead_ratio : float, optional
        Lemma 3.1's ``R_O``.
    target_speedup : float, optional
        Speedup wanted over one device (Lemma 3.1).
    max_devices : int, optional
        Rows of the scaling table; by default :data:`DEFAULT_ROWS`, or down to the
        target's row when that fits the work budget.
    param_bytes, workers, bandwidth, compute_time : optional
        Lemma 3.2's ``S_p`` (bytes), ``N_w``, ``B_ps`` (bytes/s) and ``T_C`` (s).
    max_work : int, optional
        Overrides :data:`dlsched.limits.CLUSTER_TABLE`.

    Raises
    ------
    DlschedError
        Neither lemma's inputs are complete, or one lemma's are given only in part.
    WorkLimitError
        The scaling table would exceed the work budget.

    Examples
    --------
    >>> plan_cluster(overhead_ratio=0.1, max_devices=2).table.devices.tolist()
    [1, 2]
    """
    server_args = {"--param-bytes": param_bytes, "--workers": workers, "--bandwidth": bandwidth,
                   "--compute-time": compute_time}
    servers_asked = _check_inputs(overhead_ratio, target_speedup, max_devices, server_args)
    plan: dict = {}
    if overhead_ratio is not None:
        devices = cluster.devices_needed(overhead_ratio, target_speedup) if target_speedup is not None else None
        rows = max_devices
        if rows is None:  # down to the target's row, unless that alone would be refused
            reach = max(DEFAULT_ROWS, devices or 0)
            rows = reach if reach <= (max_work or limits.CLUSTER_TABLE.limit) else DEFAULT_ROWS
        limits.check_work(limits.table_work(rows), limits.CLUSTER_TABLE, "plan-cluster's scaling table", max_work)
        plan.update(overhead_ratio=overhead_ratio, target_speedup=target_speedup, devices=devices,
                    speedup_limit=cluster.speedup_limit(overhead_ratio),
                    table=cluster.scaling_table(overhead_ratio, rows))
    if servers_asked:
        plan.update(parameter_servers=cluster.parameter_servers(param_bytes, workers, bandwidth, compute_time),
                    server_inputs={"param_bytes": param_bytes, "workers": workers,
                                   "bandwidth_bytes_per_s": bandwidth, "compute_time": compute_time})
    return ClusterPlan(**plan)
