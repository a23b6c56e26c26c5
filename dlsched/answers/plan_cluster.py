"""The ``plan-cluster`` answer: each of paper ``003_*``'s lemmas that its inputs allow.

Lemma 3.1 (devices, efficiency, speedup) needs the overhead ratio; its inverse
(the largest overhead ratio for a device count and target efficiency) needs
those two; Lemma 3.2 (parameter servers) needs the parameter bytes, workers,
bandwidth and compute time. A model with its oracle supplies the overhead
ratio, parameter bytes and compute time (:mod:`dlsched.planning.cluster_inputs`);
a figure given by hand wins over the derived one. A user may ask any set, but
not half of one: a stray input is an error rather than silently ignored. The
formulas are in :mod:`dlsched.planning.cluster`.

Examples
--------
>>> plan = plan_cluster(ModelSpec(None), OracleSpec(None), Scaling(overhead_ratio=0.1, target_speedup=3))
>>> plan.devices, len(plan.table), plan.parameter_servers is None
(4, 8, True)
>>> servers = Servers(param_bytes=180e6, workers=4, bandwidth=10e9 / 8, compute_time=0.5)
>>> plan_cluster(ModelSpec(None), OracleSpec(None), servers=servers).parameter_servers
3
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dlsched import limits
from dlsched.errors import DlschedError
from dlsched.planning import cluster

from .options import ModelSpec, OracleSpec, load_timed_model

DEFAULT_ROWS = 8  # rows of the scaling table when no target asks for more

NEEDS = ("plan-cluster answers paper 003's lemmas and needs the inputs of at least one: Lemma 3.1 "
         "(efficiency and devices for a target speedup) needs --overhead-ratio, or a MODEL with --oracle, with "
         "--target-speedup and/or --max-devices; inverted, it needs --devices and --target-efficiency; Lemma 3.2 "
         "(parameter servers) needs --param-bytes, --workers, --bandwidth and --compute-time, or a MODEL with "
         "--oracle, --workers and --bandwidth.")


SERVER_ASSUMPTIONS = (
    "every server carries an equal share of the parameter bytes",
    "each server's link moves B_ps bytes/s each way, and only the workers share it",
    "pulling parameters and pushing gradients is hidden behind one round of computation T_C")


@dataclass(frozen=True)
class ClusterPlan:
    """What :func:`plan_cluster` answers; a question not asked leaves its fields ``None``.

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
    inverse : dict or None
        Lemma 3.1 inverted: ``devices``, ``target_efficiency`` and the largest ``overhead_ratio``.
    parameter_servers : int or None
        Lemma 3.2's server count.
    server_inputs : dict or None
        Lemma 3.2's inputs, in bytes, bytes/s and seconds.
    inputs : LemmaInputs or None
        The figures read off a model, with their sources.
    sources : dict
        Figure name → where the figure used came from.
    balance : ServerBalance or None
        Bytes per server of the model's placement, with greedy's beside it.
    """

    overhead_ratio: float | None = None
    target_speedup: float | None = None
    speedup_limit: float | None = None
    devices: int | None = None
    table: object = None
    inverse: dict | None = None
    parameter_servers: int | None = None
    server_inputs: dict | None = None
    inputs: object = None
    sources: dict = field(default_factory=dict)
    balance: object = None

    def to_dict(self) -> dict:
        """The JSON form: only the questions that were answered."""
        out: dict = {}
        if self.inputs is not None:
            out.update(param_bytes=self.inputs.param_bytes, compute_time=self.inputs.compute_time,
                       makespan=self.inputs.makespan, overhead_ratio=self.inputs.overhead_ratio)
        if self.table is not None:
            out.update(overhead_ratio=self.overhead_ratio, speedup_limit=self.speedup_limit,
                       table=self.table.to_dict(orient="records"))
            if self.target_speedup is not None:
                out.update(target_speedup=self.target_speedup, devices=self.devices,
                           reachable=self.devices is not None)
        if self.inverse is not None:
            out["inverse"] = self.inverse
        if self.parameter_servers is not None:
            out["parameter_servers"] = self.parameter_servers
            out["parameter_server_inputs"] = self.server_inputs
            out["parameter_server_assumptions"] = list(SERVER_ASSUMPTIONS)
        if self.balance is not None:
            out["server_balance"] = self.balance.to_dict()
        if self.sources:
            out["sources"] = self.sources
        return out


def _check_inputs(overhead_ratio, target_speedup, max_devices, server_args: dict, inverse_args: dict) -> tuple:
    """Refuse half a question's inputs; return whether Lemma 3.2 and the inverse were asked for."""
    given = [k for k, v in server_args.items() if v is not None]
    inverse = [k for k, v in inverse_args.items() if v is not None]
    if overhead_ratio is None:
        strays = [k for k, v in (("--target-speedup", target_speedup), ("--max-devices", max_devices))
                  if v is not None]
        if strays:
            raise DlschedError(f"{' and '.join(strays)} {'belong' if len(strays) > 1 else 'belongs'} to Lemma 3.1, "
                               "which needs --overhead-ratio (or a MODEL with --oracle) as well")
        if not given and not inverse:
            raise DlschedError(NEEDS)
    if given:
        missing = [k for k, v in server_args.items() if v is None]
        if missing:
            raise DlschedError(f"the parameter-server estimate (Lemma 3.2) needs {', '.join(missing)} as well as "
                               f"{', '.join(given)}")
    if inverse and len(inverse) < len(inverse_args):
        raise DlschedError("the largest overhead ratio (Lemma 3.1 inverted) needs both --devices and "
                           f"--target-efficiency; only {inverse[0]} was given")
    return bool(given), bool(inverse)


@dataclass(frozen=True)
class Scaling:
    """Lemma 3.1's question: efficiency and speedup by device count.

    Attributes
    ----------
    overhead_ratio : float, optional
        ``R_O`` (a model with its oracle supplies it otherwise).
    target_speedup : float, optional
        Speedup wanted over one device.
    max_devices : int, optional
        Rows of the scaling table; by default :data:`DEFAULT_ROWS`, or down to the
        target's row when that fits the work budget.
    devices, target_efficiency : optional
        Lemma 3.1 inverted: the largest ``R_O`` at which ``devices`` keep ``target_efficiency``.
    """

    overhead_ratio: float | None = None
    target_speedup: float | None = None
    max_devices: int | None = None
    devices: int | None = None
    target_efficiency: float | None = None


@dataclass(frozen=True)
class Servers:
    """Lemma 3.2's inputs: ``S_p`` (``param_bytes``), ``N_w`` (``workers``), ``B_ps`` (``bandwidth``, bytes/s)
    and ``T_C`` (``compute_time``, s); a model with its oracle supplies ``S_p`` and ``T_C``."""

    param_bytes: float | None = None
    workers: int | None = None
    bandwidth: float | None = None
    compute_time: float | None = None


def plan_cluster(model: ModelSpec, oracle: OracleSpec, scaling: Scaling = Scaling(), servers: Servers = Servers(),
                 algo: str = "tac", trace: str | None = None, max_work: int | None = None) -> ClusterPlan:
    """Answer Lemma 3.1, its inverse and/or Lemma 3.2 from the inputs given or read off a model.

    Parameters
    ----------
    model, oracle : ModelSpec, OracleSpec
        A model and its time oracle, or neither: they supply ``R_O``, ``S_p`` and
        ``T_C`` unless given, and the servers' balance when it has several.
    scaling : Scaling
        Lemma 3.1 and its inverse.
    servers : Servers
        Lemma 3.2.
    algo : str
        The order of the simulated iteration behind the model's ``R_O``.
    trace : str, optional
        A measured Chrome trace whose span is the iteration behind ``R_O``.
    max_work : int, optional
        Overrides :data:`dlsched.limits.CLUSTER_TABLE`.

    Raises
    ------
    DlschedError
        No question's inputs are complete, or one is given only in part.
    WorkLimitError
        The scaling table would exceed the work budget.

    Examples
    --------
    >>> plan = plan_cluster(ModelSpec(None), OracleSpec(None), Scaling(overhead_ratio=0.1, max_devices=2))
    >>> plan.table.devices.tolist()
    [1, 2]
    >>> scaling = Scaling(devices=4, target_efficiency=0.8)
    >>> round(plan_cluster(ModelSpec(None), OracleSpec(None), scaling).inverse["overhead_ratio"], 4)
    0.0909
    """
    overhead_ratio, target_speedup, max_devices, devices, target_efficiency = (
        scaling.overhead_ratio, scaling.target_speedup, scaling.max_devices, scaling.devices, scaling.target_efficiency)
    param_bytes, workers, bandwidth, compute_time = (servers.param_bytes, servers.workers, servers.bandwidth,
                                                     servers.compute_time)
    sources: dict = {}
    inputs = balance = None
    if model.given:
        from dlsched.planning.cluster_inputs import lemma_inputs
        from dlsched.planning.server_balance import server_balance

        graph, times = load_timed_model(model, oracle)

        measured = None
        if trace is not None:
            from dlsched.analyses.bounds import trace_makespan
            from dlsched.profiling.trace_import import check_trace_of_model

            measured = trace_makespan(trace)
            check_trace_of_model(trace, graph)
        inputs = lemma_inputs(graph, times, algo, measured, f"span of the trace {trace}" if trace else "")
        balance = server_balance(graph) if graph.ps_count > 1 else None
        sources["makespan"] = inputs.sources["makespan"]
        for name, value in (("overhead_ratio", overhead_ratio), ("param_bytes", param_bytes),
                            ("compute_time", compute_time)):
            sources[name] = f"given (--{name.replace('_', '-')})" if value is not None else inputs.sources[name]
        overhead_ratio = inputs.overhead_ratio if overhead_ratio is None else overhead_ratio
        if workers is not None or bandwidth is not None:  # Lemma 3.2 asked: the model fills in the rest
            param_bytes = inputs.param_bytes if param_bytes is None else param_bytes
            compute_time = inputs.compute_time if compute_time is None else compute_time
    server_args = {"--param-bytes": param_bytes, "--workers": workers, "--bandwidth": bandwidth,
                   "--compute-time": compute_time}
    servers_asked, inverse_asked = _check_inputs(overhead_ratio, target_speedup, max_devices, server_args,
                                                 {"--devices": devices, "--target-efficiency": target_efficiency})
    plan: dict = {"inputs": inputs, "sources": sources, "balance": balance}
    if overhead_ratio is not None:
        needed = cluster.devices_needed(overhead_ratio, target_speedup) if target_speedup is not None else None
        rows = max_devices
        if rows is None:  # down to the target's row, unless that alone would be refused
            reach = max(DEFAULT_ROWS, needed or 0)
            rows = reach if reach <= (max_work or limits.CLUSTER_TABLE.limit) else DEFAULT_ROWS
        limits.check_work(limits.table_work(rows), limits.CLUSTER_TABLE, "plan-cluster's scaling table", max_work)
        plan.update(overhead_ratio=overhead_ratio, target_speedup=target_speedup, devices=needed,
                    speedup_limit=cluster.speedup_limit(overhead_ratio),
                    table=cluster.scaling_table(overhead_ratio, rows))
    if inverse_asked:
        largest = cluster.max_overhead_ratio(devices, target_efficiency)
        plan["inverse"] = {"devices": devices, "target_efficiency": target_efficiency, "overhead_ratio": largest,
                           "met": None if overhead_ratio is None else overhead_ratio <= largest}
    if servers_asked:
        plan.update(parameter_servers=cluster.parameter_servers(param_bytes, workers, bandwidth, compute_time),
                    server_inputs={"param_bytes": param_bytes, "workers": workers,
                                   "bandwidth_bytes_per_s": bandwidth, "compute_time": compute_time})
    return ClusterPlan(**plan)
