"""The ``plan-batch`` answer: one device's largest batch, or a global batch split over workers (DESIGN §5).

:func:`plan_batch` builds the memory model (static from the training
graph, or measured steps of a PyTorch factory), the reference time curve
(an oracle, measured step times, or the unit curve) and then either the
single-device plan with its throughput table (:mod:`dlsched.planning.batch`)
or the per-worker split (:mod:`dlsched.planning.hetero`) over the workers of
``--worker`` or a cluster file (:mod:`dlsched.planning.cluster_file`), or the
fastest batch under a per-layer algorithm table (:mod:`dlsched.planning.fastest_batch`).

Examples
--------
>>> import tempfile, pathlib
>>> from dlsched.formats.dag_json import save_dag
>>> from dlsched.synthetic import random_dag
>>> path = pathlib.Path(tempfile.mkdtemp()) / "m.dag.json"
>>> save_dag(random_dag(6, 3, training=True, seed=2)[0], path)
>>> plan_batch(ModelSpec(str(path)), OracleSpec(None), Memory(1_000_000)).plan.batch
1259
>>> split = plan_batch(ModelSpec(str(path)), OracleSpec(None), Memory(),
...                    workers=Workers(global_batch=30, workers=["a:1MB:1", "b:1MB:2"]))
>>> split.plan.batches, split.time_unit
([10, 20], 'reference-sample')
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from dlsched.errors import DlschedError
from dlsched.planning import batch as batchplan
from dlsched.planning.cluster_file import Cluster, parse_workers, read_cluster, worker_specs
from dlsched.planning.memory import MARGIN

from .options import ModelSpec, OracleSpec

#: Headroom kept free when neither ``--margin`` nor the cluster file gives one.
DEFAULT_MARGIN = MARGIN


@dataclass(frozen=True)
class DeviceAnswer:
    """A single-device plan, and what it was planned from.

    Attributes
    ----------
    model : str
        MODEL as given.
    optimizer : str
    plan : BatchPlan
        The largest batch, its capacity, margin and memory model.
    reference : TimeReference
        The time curve the throughput table reads.
    throughput : pandas.DataFrame or None
        ``batch, time, samples_per_s, fits``; only when times were given (an oracle or measured steps).
    measurements : list of StepMeasurement
        The measured steps (``--measure``), else empty.
    """

    model: str
    optimizer: str
    plan: batchplan.BatchPlan
    reference: batchplan.TimeReference
    throughput: object = None
    measurements: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """The JSON form."""
        out = {"model": self.model, **self.plan.to_dict(), "optimizer": self.optimizer}
        if self.throughput is not None:
            out["throughput"] = self.throughput.to_dict(orient="records")
            out["time_source"] = self.reference.source
        if self.measurements:
            out["measurements"] = [{"batch": p.batch, "peak": p.peak_bytes, "seconds": p.seconds}
                                   for p in self.measurements]
        return out


@dataclass(frozen=True)
class SplitAnswer:
    """A global batch split over heterogeneous workers, and what it was planned from.

    Attributes
    ----------
    estimate : MemoryEstimate
    plan : HeteroPlan
    margin : float
        Headroom kept free on every worker.
    time_unit : {"s", "reference-sample"}
    time_source : str
        Where the times come from, in words.
    """

    estimate: object
    plan: object
    margin: float
    time_unit: str
    time_source: str

    def to_dict(self) -> dict:
        """The JSON form."""
        return {**self.plan.to_dict(), "estimate": self.estimate.estimate, "optimizer": self.estimate.optimizer,
                "margin": self.margin, "time_unit": self.time_unit, "time_source": self.time_source}


@dataclass(frozen=True)
class Memory:
    """One device's memory and what fills it.

    Attributes
    ----------
    capacity : float, optional
        One device's capacity in bytes (single-device plan).
    margin : float, optional
        Headroom kept free; by default the cluster file's, else :data:`DEFAULT_MARGIN`.
    optimizer : {"sgd", "momentum", "adam"}
    dtype : str, optional
        Parameter dtype of the static estimate.
    """

    capacity: float | None = None
    margin: float | None = None
    optimizer: str = "sgd"
    dtype: str | None = None


@dataclass(frozen=True)
class Measure:
    """Measure real training steps of a PyTorch factory at ``batches`` on ``device`` instead of the static estimate."""

    batches: Sequence[int] | None = None
    device: str = "cpu"


@dataclass(frozen=True)
class Workers:
    """A global batch to split: ``NAME:MEMORY[:SPEED]`` texts
    (:func:`~dlsched.planning.cluster_file.parse_workers`) or a cluster file
    (:func:`~dlsched.planning.cluster_file.read_cluster`), not both;
    ``global_batch`` by default the cluster file's."""

    global_batch: int | None = None
    workers: Sequence[str] = ()
    cluster: str | None = None


@dataclass(frozen=True)
class Fastest:
    """The fastest batch under a per-layer algorithm ``table`` (:mod:`dlsched.formats.algorithm_table`), one device
    only: the batches considered (default: the table's), the number of ``classes`` (smaller batches are refused),
    and how the layers' ``workspace`` shares memory (``sum`` or ``max``)."""

    table: str | None = None
    batch_range: tuple[int, int] | None = None
    classes: int | None = None
    workspace: str = "sum"


def _workers(workers, cluster) -> Cluster | None:
    """The workers of ``--worker`` or of a cluster file; ``None`` for a single-device plan."""
    if workers and cluster:
        raise DlschedError("give workers either with --worker or with --cluster, not both")
    if cluster:
        return read_cluster(cluster)
    return parse_workers(workers) if workers else None


def _memory_model(model: ModelSpec, optimizer, dtype, measure_batches, device):
    """The memory estimate, the graph it came from (static) and the measured steps (measured)."""
    if measure_batches is not None:
        from dlsched.planning.measure import measured_estimate

        est, points = measured_estimate(model.path, measure_batches, optimizer, device, time_steps=True)
        return est, None, points
    from dlsched.importers.loader import detect_format
    from dlsched.planning.memory import static_estimate

    batch = model.batch
    # on a saved DAG, --batch only says which batch the oracle was profiled at
    graph = replace(model, mode="training", batch=None if detect_format(model.path) == "dag" else batch).load()
    return static_estimate(graph, optimizer=optimizer, dtype=dtype, batch=batch), graph, []


def _reference(oracle, graph, batch, points, device) -> batchplan.TimeReference:
    """``t_ref(b)`` from the oracle, else the measured steps, else the unit curve."""
    if oracle:
        # the batch the oracle records; an older oracle with --measure (no graph) needs --batch to tell it
        at = batchplan.profiled_batch(batch, graph, "--oracle with --measure needs --batch: the batch the oracle was "
                                      "profiled at", oracle=oracle)
        return batchplan.TimeReference(batchplan.oracle_time_curve(oracle, graph, at), True, "s",
                                       f"oracle {oracle} at batch {at}")
    if points:
        return batchplan.TimeReference(batchplan.interpolated_time_curve({p.batch: p.seconds for p in points}),
                                       False, "s", f"measured steps on {device}")
    return batchplan.TimeReference()


def _exposed_transfers(oracle: str, graph) -> float:
    """Seconds of a simulated single-worker iteration (TAC) that its compute does not fill: the transfers
    every worker waits for whatever its batch (see :mod:`dlsched.planning.cluster_inputs`)."""
    from dlsched.planning.cluster_inputs import lemma_inputs
    from dlsched.profiling.oracle_times import load_times

    inputs = lemma_inputs(graph, load_times(oracle, graph, 0.0, any_batch=True))
    return max(0.0, inputs.makespan - inputs.compute_time)


def plan_batch(model: ModelSpec, oracle: OracleSpec, memory: Memory, measure: Measure = Measure(),
               workers: Workers = Workers(), fastest: Fastest = Fastest(), max_work: int | None = None):
    """Plan the batch for one device (``memory.capacity``) or split a global batch over ``workers``.

    Parameters
    ----------
    model : ModelSpec
        A model file, or a PyTorch factory ``file.py:fn`` with ``measure``; its
        ``batch`` is the batch it is imported at (and the oracle was profiled
        at), ``buffers`` treats torch buffers as parameters.
    oracle : OracleSpec
        MODEL's time oracle, when given: the reference time curve in seconds.
    memory : Memory
    measure : Measure
    workers : Workers
    fastest : Fastest
        With a table: pick the batch with the most samples/s instead of the largest
        (:func:`~dlsched.planning.fastest_batch.fastest_batch`).
    max_work : int, optional
        Overrides :data:`dlsched.limits.PLAN_BATCH` for the exact split.

    Returns
    -------
    DeviceAnswer, SplitAnswer or FastestBatch
        ``SplitAnswer`` when workers were given, ``FastestBatch`` with an algorithm table.

    Raises
    ------
    DlschedError
        Both worker texts and a cluster file; no memory for one device, or no global
        batch for workers; a bad cluster file or worker text; a model that does not
        fit; a global batch above what the workers hold.
    WorkLimitError
        The exact split would exceed its work budget.

    Examples
    --------
    >>> plan_batch(ModelSpec("model.dag.json"), OracleSpec(None), Memory())
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: give --memory for a single-device plan, or --global-batch with --worker/--cluster
    """
    margin, capacity, optimizer, global_batch = memory.margin, memory.capacity, memory.optimizer, workers.global_batch
    algorithms, oracle, batch = fastest.table, oracle.path, model.batch
    cluster_ = _workers(workers.workers, workers.cluster)
    if cluster_ is not None:
        margin = margin if margin is not None else cluster_.margin
        global_batch = global_batch if global_batch is not None else cluster_.global_batch
        if global_batch is None:
            raise DlschedError("a heterogeneous plan needs --global-batch X (or global_batch in the cluster file)")
    elif capacity is None:
        raise DlschedError("give --memory for a single-device plan, or --global-batch with --worker/--cluster")
    margin = DEFAULT_MARGIN if margin is None else margin
    if algorithms is not None and (cluster_ is not None or fastest.classes is None):
        raise DlschedError("--algorithms picks the fastest batch for one device: it needs --memory and --classes N "
                           "(batches below the number of classes are refused, as paper 003 requires), and no "
                           "--worker/--cluster")
    est, graph, points = _memory_model(model, optimizer, memory.dtype, measure.batches, measure.device)
    if algorithms is not None:
        from dlsched.formats.algorithm_table import read_algorithm_table
        from dlsched.planning.fastest_batch import LinearMemory, fastest_batch

        table = read_algorithm_table(algorithms)
        lo_hi = fastest.batch_range or (int(table["batch"].min()), int(table["batch"].max()))
        return fastest_batch(table, LinearMemory.from_estimate(est, capacity, margin), lo_hi, fastest.classes,
                             fastest.workspace)
    reference = _reference(oracle, graph, batch, points, measure.device)
    if cluster_ is not None:
        from dlsched.planning.hetero import plan_workers

        specs, unit, source = worker_specs(cluster_.workers, est, margin, reference, graph, batch)
        plan = plan_workers(specs, global_batch, max_work=max_work)
        if oracle and graph is not None:
            plan.transfer_time = _exposed_transfers(oracle, graph)
        return SplitAnswer(est, plan, margin, unit, source)
    plan = batchplan.plan_batch(est, capacity, margin)
    table = None
    if oracle or points:
        bs = batchplan.default_table_batches(plan.batch)
        if points and not oracle:  # measured points and the plan; no extrapolation below the points
            bs = sorted({p.batch for p in points} | {plan.batch})
        table = batchplan.throughput_table(reference.curve, bs, plan.batch)
    return DeviceAnswer(model.path, optimizer, plan, reference, table, points)
