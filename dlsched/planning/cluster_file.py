"""The workers of a heterogeneous batch plan: the cluster file, ``--worker`` and their time curves (DESIGN §5).

Cluster file (``plan-batch --cluster cluster.yaml``)::

    global_batch: 128          # optional; --global-batch overrides it
    margin: 0.1                # optional; --margin overrides it when given
    workers:                   # in this order in every output
      - name: gpu-a
        memory: 16GiB          # capacity → the worker's largest batch via the memory model
        speed: 2.0             # relative to the reference time curve (default 1)
      - name: gpu-b
        memory: 8GiB
        oracle: gpu-b.csv      # this device's own time oracle (path relative to the file):
                               # t(b) = Σ compute times · b / the model's batch
      - name: gpu-c
        memory: 12GiB
        times: {8: 0.11, 16: 0.20, 32: 0.41}   # measured seconds per step by batch:
                                               # piecewise-linear curve → exact solver
        bandwidth: 1Gbps       # optional, any worker: its time adds S_p / B (the model's
                               # parameter bytes over this link) → exact solver

A worker gives at most one of ``speed``, ``oracle``, ``times``. On the command
line, ``--worker NAME:MEMORY[:SPEED]`` gives a speed-only worker.
:func:`worker_specs` turns either into the :class:`~dlsched.planning.hetero.WorkerSpec`
list the planner splits a global batch over.

Examples
--------
>>> cluster = parse_cluster({"global_batch": 64, "workers": [{"name": "a", "memory": "1KiB", "speed": 2}]}, "c.yaml")
>>> cluster.global_batch, cluster.margin, cluster.workers
(64, None, [Worker(name='a', memory=1024, speed=2.0, oracle=None, times=None, bandwidth=None)])
>>> parse_workers(["gpu0:16GiB:1.5"]).workers[0].speed
1.5
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from dlsched.errors import DlschedError
from dlsched.units import parse_quantity

from . import batch as batchplan
from .hetero import WorkerSpec

KEYS = ("name", "memory", "speed", "oracle", "times", "bandwidth")


@dataclass(frozen=True)
class Worker:
    """One worker as the user described it: memory, and at most one of a speed, an oracle or measured times.

    Attributes
    ----------
    name : str
    memory : int
        Bytes.
    speed : float
        Relative to the reference time curve (1 unless given).
    oracle : str or None
        This device's own time-oracle file.
    times : dict or None
        Measured seconds per step by batch.
    bandwidth : float or None
        Bytes/s of the worker's link: its time adds ``S_p / B`` (parameter bytes over the link).
    """

    name: str
    memory: int
    speed: float = 1.0
    oracle: str | None = None
    times: dict | None = None
    bandwidth: float | None = None

    @property
    def timed(self) -> bool:
        """Its time is in seconds of its own (an oracle or measured times), not a speed."""
        return self.oracle is not None or self.times is not None


@dataclass(frozen=True)
class Cluster:
    """Workers in output order, and the global batch and margin a cluster file may give."""

    workers: list[Worker] = field(default_factory=list)
    global_batch: int | None = None
    margin: float | None = None


def _speed(value, where: str) -> float:
    """A worker's relative speed: a finite number > 0."""
    try:
        speed = float(value)
    except (TypeError, ValueError):
        raise DlschedError(f"{where}: speed {value!r} is not a number") from None
    if not (speed > 0 and math.isfinite(speed)):
        raise DlschedError(f"{where}: speed must be a finite number above 0, got {value!r}")
    return speed


def _global_batch(value, where: str) -> int:
    """A global batch from a cluster file: a whole number of samples ≥ 1."""
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 1:
        raise DlschedError(f"{where}: global_batch must be a whole number of samples ≥ 1, got {value!r}")
    return int(value)


def _times(value, where: str) -> dict[int, float]:
    """Measured ``{batch: seconds}``: batches ≥ 1, finite times ≥ 0."""
    try:
        times = {int(b): float(t) for b, t in dict(value).items()}
    except (TypeError, ValueError):
        raise DlschedError(f"{where}: 'times' must map batch sizes to seconds, e.g. {{8: 0.1, 16: 0.19}}") from None
    if not times or any(b < 1 or not 0 <= t < float("inf") for b, t in times.items()):
        raise DlschedError(f"{where}: 'times' needs batch sizes ≥ 1 and finite times ≥ 0 seconds, got {value!r}")
    return times


def _worker(w, where: str, path: str, base: Path, taken: list[str]) -> Worker:
    """One entry of a cluster file's ``workers`` list; ``taken``: the names before it."""
    if not isinstance(w, dict) or "name" not in w or "memory" not in w:
        raise DlschedError(f"{where} needs 'name' and 'memory'")
    unknown = set(w) - set(KEYS)
    if unknown:
        raise DlschedError(f"{where} ({w['name']}) has unknown key(s) {', '.join(sorted(unknown))}; "
                           f"known: {', '.join(KEYS)}")
    if sum(k in w for k in ("speed", "oracle", "times")) > 1:
        raise DlschedError(f"{where} ({w['name']}) gives more than one of speed, oracle, times")
    name = str(w["name"])
    if name in taken:
        raise DlschedError(f"{path}: worker name {name!r} appears twice")
    where = f"{where} ({name})"
    oracle = None
    if "oracle" in w:  # relative to the cluster file, not to where the command runs
        oracle = str(w["oracle"]) if Path(str(w["oracle"])).is_absolute() else str((base / str(w["oracle"])).resolve())
    return Worker(name, parse_quantity("bytes", w["memory"], f"{where}: memory"),
                  _speed(w["speed"], where) if "speed" in w else 1.0, oracle,
                  _times(w["times"], where) if "times" in w else None,
                  parse_quantity("bandwidth", w["bandwidth"], f"{where}: bandwidth") if "bandwidth" in w else None)


def parse_cluster(doc, path: str, base: str | Path = ".") -> Cluster:
    """Check a loaded cluster file; ``path`` names it in errors, ``base`` is the folder oracle paths are relative to.

    Raises
    ------
    DlschedError
        No ``workers`` list, a worker without name or memory, an unknown key, two
        time sources for one worker, a name given twice, or a value that means nothing.

    Examples
    --------
    >>> parse_cluster({"workers": [{"name": "a", "memory": "1GiB", "speed": 1, "times": {8: 0.1}}]}, "c.yaml")
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: c.yaml: worker 1 (a) gives more than one of speed, oracle, times
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("workers"), list) or not doc["workers"]:
        raise DlschedError(f"{path}: a cluster file needs a non-empty 'workers' list "
                           "(each with name and memory, and speed, oracle or times)")
    workers: list[Worker] = []
    for i, w in enumerate(doc["workers"]):
        workers.append(_worker(w, f"{path}: worker {i + 1}", path, Path(base), [o.name for o in workers]))
    batch, margin = doc.get("global_batch"), doc.get("margin")
    return Cluster(workers, None if batch is None else _global_batch(batch, path),
                   None if margin is None else parse_quantity("fraction", margin, f"{path}: margin"))


def read_cluster(path: str | Path) -> Cluster:
    """Read and check a cluster YAML file (:func:`parse_cluster`).

    Raises
    ------
    DlschedError
        The file is missing, unreadable or not YAML, or its content is refused by :func:`parse_cluster`.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "cluster.yaml"
    >>> _ = p.write_text("workers:\\n  - {name: a, memory: 8GiB, oracle: a.csv}\\n")
    >>> read_cluster(p).workers[0].oracle == str(p.parent.resolve() / "a.csv")
    True
    """
    import yaml

    p = Path(path)
    if not p.exists():
        raise DlschedError(f"{path}: no such cluster file")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise DlschedError(f"{path}: not valid YAML ({e})".replace("\n", " ")) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DlschedError(f"{path}: cannot read the cluster file ({getattr(e, 'strerror', None) or e})") from None
    return parse_cluster(doc, str(path), p.parent)


def parse_workers(texts) -> Cluster:
    """Speed-only workers from ``--worker NAME:MEMORY[:SPEED]`` texts, in order.

    Raises
    ------
    DlschedError
        A text that is not ``NAME:MEMORY[:SPEED]``, a memory or speed that means nothing, or a name given twice.

    Examples
    --------
    >>> parse_workers(["a:1KiB", "b:2KiB:3"]).workers[1]
    Worker(name='b', memory=2048, speed=3.0, oracle=None, times=None, bandwidth=None)
    """
    workers = []
    for text in texts:
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise DlschedError(f"--worker {text!r}: expected NAME:MEMORY[:SPEED], e.g. gpu0:16GiB:1.5")
        speed = _speed(parts[2], f"--worker {text!r}") if len(parts) == 3 else 1.0
        workers.append(Worker(parts[0], parse_quantity("bytes", parts[1], f"--worker {text!r}: memory"), speed))
    names = [w.name for w in workers]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise DlschedError(f"--worker name(s) given twice: {', '.join(sorted(dup))}")
    return Cluster(workers)


def worker_specs(workers, estimate, margin: float, reference: batchplan.TimeReference, graph=None,
                 batch: int | None = None) -> tuple[list[WorkerSpec], str, str]:
    """Each worker's largest batch and time curve, and the unit and source the plan's times are in.

    Parameters
    ----------
    workers : sequence of Worker
    estimate : MemoryEstimate
        The model's memory model; a worker's cap is its largest batch in its memory.
    margin : float
        Headroom kept free on every worker.
    reference : TimeReference
        ``t_ref(b)``, which a speed-only worker's time divides by its speed.
    graph : Graph, optional
        The model, whose compute ops an oracle worker's file is summed over.
    batch : int, optional
        The batch oracles were profiled at (default: the graph's).

    Returns
    -------
    (list of WorkerSpec, str, str)
        The specs, the time unit (``"s"`` or ``"reference-sample"``) and the time source in words.

    Raises
    ------
    DlschedError
        Speed-only workers mixed with workers timed in seconds while the reference
        has no seconds, or an oracle worker without a profiled batch.

    Examples
    --------
    >>> from dlsched.planning.memory import MemoryEstimate
    >>> est = MemoryEstimate("m", "static", "sgd", param_bytes=100, activation_bytes_per_sample=10)
    >>> workers = [Worker("a", 1000), Worker("b", 1000, times={10: 0.5})]
    >>> worker_specs(workers, est, 0.1, batchplan.TimeReference())
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: workers b have times in seconds (oracle or times) but a only a speed, ...
    >>> specs, unit, source = worker_specs(workers[1:], est, 0.1, batchplan.TimeReference())
    >>> specs[0].max_batch, unit, source
    (70, 's', "each worker's own oracle or measured times")
    """
    timed = [w.name for w in workers if w.timed]
    speed_only = [w.name for w in workers if not w.timed]
    if timed and speed_only and reference.unit != "s":
        raise DlschedError(
            f"workers {', '.join(timed)} have times in seconds (oracle or times) but {', '.join(speed_only)} "
            "only a speed, which is relative to a reference time curve; give --oracle or --measure for that "
            "reference, or a time source for every worker")
    specs = []
    for w in workers:
        cap = estimate.largest_batch(w.memory, margin)
        if w.oracle is not None:
            at = batchplan.profiled_batch(batch, graph, f"worker {w.name}: an oracle per worker needs --batch (the "
                                          "batch it was profiled at)", oracle=w.oracle)
            curve = batchplan.oracle_time_curve(w.oracle, graph, at)
            # relative speed against the reference curve, when there is one in seconds
            speed = reference.curve(1) / curve(1) if reference.unit == "s" and curve(1) > 0 else float("nan")
            specs.append(WorkerSpec(w.name, cap, curve, speed=speed, memory=w.memory, linear=True, source=w.oracle))
        elif w.times is not None:
            specs.append(WorkerSpec(w.name, cap, batchplan.interpolated_time_curve(w.times), speed=float("nan"),
                                    memory=w.memory, linear=False, source="measured times"))
        else:
            specs.append(WorkerSpec(w.name, cap, (lambda b, s=w.speed: reference.curve(b) / s), speed=w.speed,
                                    memory=w.memory, linear=reference.linear, source=f"speed × {reference.source}"))
    for spec, w in zip(specs, workers):
        if w.bandwidth is not None:  # t_i(b) = compute_i(b) + S_p / B_i: a fixed cost, so no closed form
            spec.curve = (lambda b, c=spec.curve, x=estimate.param_bytes / w.bandwidth: c(b) + x)
            spec.linear, spec.source = False, f"{spec.source} + S_p/B ({estimate.param_bytes / w.bandwidth:.3g})"
    if not timed:
        return specs, reference.unit, reference.source
    return specs, "s", reference.source if reference.unit == "s" else "each worker's own oracle or measured times"
