"""``dlsched plan-batch MODEL``: memory-bounded batch plans, for one device or per worker (DESIGN §5).

Cluster file (``--cluster cluster.yaml``)::

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

A worker gives at most one of ``speed``, ``oracle``, ``times``.
"""
from __future__ import annotations

import click

from dlsched import limits

from .common import (BYTES, FRACTION, POSITIVE_INT, console, emit_json, fmt_bytes, fmt_seconds, max_work_option,
                     parse_quantity)


def _speed(value, where: str) -> float:
    """A worker's relative speed: a finite number > 0."""
    import math

    from dlsched.errors import DlschedError

    try:
        speed = float(value)
    except (TypeError, ValueError):
        raise DlschedError(f"{where}: speed {value!r} is not a number") from None
    if not (speed > 0 and math.isfinite(speed)):
        raise DlschedError(f"{where}: speed must be a finite number above 0, got {value!r}")
    return speed


def _global_batch(value, where: str) -> int:
    """A global batch from a cluster file: a whole number of samples ≥ 1."""
    from dlsched.errors import DlschedError

    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 1:
        raise DlschedError(f"{where}: global_batch must be a whole number of samples ≥ 1, got {value!r}")
    return int(value)


def _parse_worker(text: str):
    from dlsched.errors import DlschedError

    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise DlschedError(f"--worker {text!r}: expected NAME:MEMORY[:SPEED], e.g. gpu0:16GiB:1.5")
    speed = _speed(parts[2], f"--worker {text!r}") if len(parts) == 3 else 1.0
    return {"name": parts[0], "memory": parse_quantity("bytes", parts[1], f"--worker {text!r}: memory"),
            "speed": speed}


def _read_cluster(path: str):
    """Workers (and optional global batch / margin) from a cluster YAML file."""
    from pathlib import Path

    import yaml

    from dlsched.errors import DlschedError

    p = Path(path)
    if not p.exists():
        raise DlschedError(f"{path}: no such cluster file")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise DlschedError(f"{path}: not valid YAML ({e})".replace("\n", " ")) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DlschedError(f"{path}: cannot read the cluster file ({getattr(e, 'strerror', None) or e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("workers"), list) or not doc["workers"]:
        raise DlschedError(f"{path}: a cluster file needs a non-empty 'workers' list "
                           "(each with name and memory, and speed, oracle or times)")
    workers, names = [], set()
    for i, w in enumerate(doc["workers"]):
        where = f"{path}: worker {i + 1}"
        if not isinstance(w, dict) or "name" not in w or "memory" not in w:
            raise DlschedError(f"{where} needs 'name' and 'memory'")
        unknown = set(w) - {"name", "memory", "speed", "oracle", "times"}
        if unknown:
            raise DlschedError(f"{where} ({w['name']}) has unknown key(s) {', '.join(sorted(unknown))}; "
                               "known: name, memory, speed, oracle, times")
        if sum(k in w for k in ("speed", "oracle", "times")) > 1:
            raise DlschedError(f"{where} ({w['name']}) gives more than one of speed, oracle, times")
        name = str(w["name"])
        if name in names:
            raise DlschedError(f"{path}: worker name {name!r} appears twice")
        names.add(name)
        entry = {"name": name, "memory": parse_quantity("bytes", w["memory"], f"{where} ({name}): memory"),
                 "speed": 1.0}
        if "speed" in w:
            entry["speed"] = _speed(w["speed"], f"{where} ({name})")
        if "oracle" in w:
            entry["oracle"] = str((p.parent / str(w["oracle"])).resolve()) if not Path(str(w["oracle"])).is_absolute() \
                else str(w["oracle"])
        if "times" in w:
            times = w["times"]
            try:
                entry["times"] = {int(b): float(t) for b, t in dict(times).items()}
            except (TypeError, ValueError):
                raise DlschedError(f"{where} ({name}): 'times' must map batch sizes to seconds, "
                                   "e.g. {8: 0.1, 16: 0.19}") from None
            if not entry["times"] or any(b < 1 or not 0 <= t < float("inf") for b, t in entry["times"].items()):
                raise DlschedError(f"{where} ({name}): 'times' needs batch sizes ≥ 1 and finite times ≥ 0 "
                                   f"seconds, got {times!r}")
        workers.append(entry)
    batch = doc.get("global_batch")
    margin = doc.get("margin")
    return (workers, None if batch is None else _global_batch(batch, path),
            None if margin is None else parse_quantity("fraction", margin, f"{path}: margin"))


def _compute_seconds(oracle_path: str, graph):
    """Σ compute-op time of an oracle file (rows on a compute resource, or the graph's compute ops)."""
    import pandas as pd

    from dlsched.errors import OracleError
    from dlsched.exporters.oracle_file import read_oracle

    df = read_oracle(oracle_path)
    times = pd.to_numeric(df["time"])
    if "resource" in df.columns:
        mask = df["resource"].astype(str).str.startswith("compute")
    elif graph is not None:
        names = {op.name for op in graph.compute_ops()}
        mask = df["op"].astype(str).isin(names)
    else:
        mask = pd.Series(True, index=df.index)
    total = float(times[mask].sum())
    if not mask.any() or total <= 0:
        raise OracleError(f"{oracle_path}: no compute-op times in this oracle (rows need a compute resource "
                          "or names of the model's compute ops)")
    return total


@click.command("plan-batch")
@click.argument("model")
@click.option("--memory", type=BYTES, default=None, help="Device memory capacity, e.g. 16GiB (single-device plan).")
@click.option("--margin", type=FRACTION, default="0.1", show_default=True, help="Headroom kept free: 0.1 or 10%.")
@click.option("--optimizer", type=click.Choice(["sgd", "momentum", "adam"]), default="sgd", show_default=True,
              help="Optimizer state copies: sgd 0, momentum 1, adam 2.")
@click.option("--dtype", default=None, help="Parameter dtype for the static estimate (default: as imported).")
@click.option("--measure", is_flag=True, help="Measure peak memory of real training steps (PyTorch factories).")
@click.option("--measure-batches", default="2,4", show_default=True,
              help="Batch sizes measured with --measure (two or more).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where --measure runs its steps.")
@click.option("--oracle", default=None, help="Time oracle of MODEL: Σ compute times, scaled linearly in batch.")
@click.option("--batch", type=POSITIVE_INT, default=None, help="Batch to import MODEL at (static).")
@click.option("--buffers", is_flag=True, help="torch: also treat registered buffers as parameters.")
@click.option("--global-batch", type=POSITIVE_INT, default=None, help="Global batch X to split over workers.")
@click.option("--worker", "workers", multiple=True, help="NAME:MEMORY[:SPEED], repeatable (heterogeneous plan).")
@click.option("--cluster", "cluster_file", default=None, help="Cluster YAML file (see the command's module docs).")
@max_work_option(limits.PLAN_BATCH)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def plan_batch(model, memory, margin, optimizer, dtype, measure, measure_batches, device, oracle, batch, buffers,
               global_batch, workers, cluster_file, max_work, as_json):
    """Largest batch that fits a device's memory, or per-worker batches for a
    heterogeneous cluster (LB-BSP).

    M(b) = params·(2 + k_opt) + b·(activations + workspace) per sample. The
    static estimate loads MODEL in training mode and reads the forward outputs
    the backward pass keeps; --measure runs real training steps of a PyTorch
    factory and fits peak memory linearly in the batch.

    Heterogeneous: --global-batch X with --worker NAME:MEMORY[:SPEED] (repeat)
    or --cluster cluster.yaml. Each worker's time is t_ref(b)/speed, with t_ref
    from --oracle (seconds), --measure (measured step times) or a unit curve.
    """
    from dlsched.errors import DlschedError
    from dlsched.planning import batch as batchplan

    margin_v = margin
    hetero = bool(workers or cluster_file)
    if workers and cluster_file:
        raise DlschedError("give workers either with --worker or with --cluster, not both")
    worker_specs, file_batch, file_margin = [], None, None
    if cluster_file:
        worker_specs, file_batch, file_margin = _read_cluster(cluster_file)
        ctx = click.get_current_context()
        if file_margin is not None and ctx.get_parameter_source("margin").name == "DEFAULT":
            margin_v = file_margin
    elif workers:
        worker_specs = [_parse_worker(w) for w in workers]
        names = [w["name"] for w in worker_specs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise DlschedError(f"--worker name(s) given twice: {', '.join(sorted(dup))}")
    if hetero:
        global_batch = global_batch if global_batch is not None else file_batch
        if global_batch is None:
            raise DlschedError("a heterogeneous plan needs --global-batch X (or global_batch in the cluster file)")
    elif memory is None:
        raise DlschedError("give --memory for a single-device plan, or --global-batch with --worker/--cluster")

    # -- the memory model -------------------------------------------------
    graph = None
    points = []
    if measure:
        from dlsched.planning.measure import measured_estimate

        try:
            mb = [int(x) for x in measure_batches.split(",") if x.strip()]
        except ValueError:
            raise DlschedError(f"--measure-batches {measure_batches!r}: expected comma-separated integers") from None
        est, points = measured_estimate(model, mb, optimizer, device, time_steps=True)
    else:
        from dlsched.loader import load_model
        from dlsched.planning.memory import static_estimate

        graph = load_model(model, mode="training", batch=batch, buffers=buffers)
        est = static_estimate(graph, optimizer=optimizer, dtype=dtype, batch=batch)

    # -- the reference time curve -------------------------------------------
    ref_curve, ref_linear, time_unit, time_source = (lambda b: float(b)), True, "reference-sample", "unit"
    if oracle:
        from dlsched.planning.memory import graph_batch

        if graph is None and not measure:
            from dlsched.loader import load_model
            graph = load_model(model, mode="training", batch=batch, buffers=buffers)
        ref_batch = batch or (graph_batch(graph) if graph is not None else None)
        if ref_batch is None:
            raise DlschedError("--oracle with --measure needs --batch: the batch the oracle was profiled at")
        ref_curve = batchplan.linear_time_curve(_compute_seconds(oracle, graph), ref_batch)
        time_unit, time_source = "s", f"oracle {oracle} at batch {ref_batch}"
    elif measure:
        ref_curve = batchplan.interpolated_time_curve({p.batch: p.seconds for p in points})
        ref_linear, time_unit, time_source = False, "s", f"measured steps on {device}"

    if hetero:
        _hetero(est, worker_specs, global_batch, margin_v, ref_curve, ref_linear, time_unit, time_source,
                batch, graph, max_work, as_json)
        return

    capacity = memory
    plan = batchplan.plan_batch(est, capacity, margin_v)
    table = None
    if oracle or measure:
        bs = batchplan.default_table_batches(plan.batch)
        if measure and not oracle:  # measured points and the plan; no extrapolation below the points
            bs = sorted({p.batch for p in points} | {plan.batch})
        table = batchplan.throughput_table(ref_curve, bs, plan.batch)
    if as_json:
        out = {"model": model, **plan.to_dict(), "optimizer": optimizer}
        if table is not None:
            out["throughput"] = table.to_dict(orient="records")
            out["time_source"] = time_source
        if points:
            out["measurements"] = [{"batch": p.batch, "peak": p.peak_bytes, "seconds": p.seconds} for p in points]
        emit_json(out)
        return
    from rich.table import Table

    console.print(f"[bold]{est.model}[/]: largest batch [bold green]{plan.batch}[/] in {fmt_bytes(capacity)} "
                  f"(usable {fmt_bytes(plan.usable_bytes)} with a {margin_v:.0%} margin), "
                  f"[bold]{est.estimate}[/] estimate, optimizer {optimizer}")
    t = Table(title=f"memory at batch {plan.batch}", title_justify="left")
    t.add_column("component")
    t.add_column("bytes", justify="right")
    t.add_column("note")
    for r in plan.frame().itertuples():
        t.add_row(r.component, fmt_bytes(r.bytes), r.note)
    console.print(t)
    if est.estimate == "measured":
        pts = ", ".join(f"b={p.batch}: {fmt_bytes(p.peak_bytes)}" for p in points)
        console.print(f"measured peaks ({est.details['method']}): {pts}")
    if table is not None:
        console.print(f"[bold]throughput[/] ({time_source}; an oracle scales linearly in the batch)"
                      if oracle else f"[bold]throughput[/] ({time_source})")
        tt = Table()
        for c in ("batch", "step time", "samples/s", "fits"):
            tt.add_column(c, justify="right")
        for r in table.itertuples():
            tt.add_row(str(r.batch), fmt_seconds(r.time), f"{r.samples_per_s:,.1f}", "yes" if r.fits else "no")
        console.print(tt)


def _short_seconds(x: float) -> str:
    return f"{x:.3g} s" if x >= 1 else f"{x * 1e3:.4g} ms"


def _hetero(est, worker_specs, global_batch, margin, ref_curve, ref_linear, time_unit, time_source, batch, graph,
            max_work, as_json):
    from dlsched.planning import batch as batchplan
    from dlsched.planning.hetero import WorkerSpec, plan_workers

    from dlsched.errors import DlschedError

    timed = [w["name"] for w in worker_specs if "oracle" in w or "times" in w]
    speed_only = [w["name"] for w in worker_specs if "oracle" not in w and "times" not in w]
    if timed and speed_only and time_unit != "s":
        raise DlschedError(
            f"workers {', '.join(timed)} have times in seconds (oracle or times) but {', '.join(speed_only)} "
            "only a speed, which is relative to a reference time curve; give --oracle or --measure for that "
            "reference, or a time source for every worker")
    specs = []
    for w in worker_specs:
        cap = est.largest_batch(w["memory"], margin)
        if "oracle" in w:
            from dlsched.planning.memory import graph_batch

            ref_batch = batch or (graph_batch(graph) if graph is not None else None)
            if ref_batch is None:
                raise DlschedError(f"worker {w['name']}: an oracle per worker needs --batch (the batch it was "
                                   "profiled at)")
            curve = batchplan.linear_time_curve(_compute_seconds(w["oracle"], graph), ref_batch)
            # relative speed against the reference curve, when there is one in seconds
            speed = ref_curve(1) / curve(1) if time_unit == "s" and curve(1) > 0 else float("nan")
            specs.append(WorkerSpec(w["name"], cap, curve, speed=speed, memory=w["memory"], linear=True,
                                    source=w["oracle"]))
        elif "times" in w:
            curve = batchplan.interpolated_time_curve(w["times"])
            specs.append(WorkerSpec(w["name"], cap, curve, speed=float("nan"), memory=w["memory"], linear=False,
                                    source="measured times"))
        else:
            speed = w["speed"]
            specs.append(WorkerSpec(w["name"], cap, (lambda b, s=speed: ref_curve(b) / s), speed=speed,
                                    memory=w["memory"], linear=ref_linear, source=f"speed × {time_source}"))
    if timed:
        if time_unit != "s":
            time_source = "each worker's own oracle or measured times"
        time_unit = "s"
    plan = plan_workers(specs, global_batch, max_work=max_work)
    if as_json:
        d = plan.to_dict()
        d.update(estimate=est.estimate, optimizer=est.optimizer, margin=margin, time_unit=time_unit,
                 time_source=time_source)
        emit_json(d)
        return
    from rich.table import Table

    unit = _short_seconds if time_unit == "s" else (lambda x: f"{x:.4g}")
    console.print(f"[bold]{est.model}[/]: global batch {global_batch} over {len(specs)} workers, "
                  f"{plan.method} split, {est.estimate} memory estimate, times "
                  f"{'in seconds' if time_unit == 's' else 'in reference per-sample units'} ({time_source})")
    from rich import box

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("worker", "memory", "max b", "speed", "batch", "time", "weight", "equal split"):
        t.add_column(c, justify="right" if c != "worker" else "left", no_wrap=True)
    for r, w in zip(plan.frame().itertuples(), specs):
        eq = f"{r.equal_batch}{'' if r.equal_fits else '*'} ({unit(r.equal_time)})"
        t.add_row(r.worker, fmt_bytes(w.memory), str(r.max_batch), "-" if r.speed != r.speed else f"{r.speed:g}",
                  str(r.batch), unit(r.time), f"{r.weight:.3f}", eq)
    console.print(t)
    d = plan.to_dict()
    console.print("weight = n·b/X, the factor on each worker's gradient that keeps the aggregate unbiased")
    if d["equal_split_violations"]:
        console.print(f"iteration time: plan {unit(d['iteration_time'])}; the equal split "
                      f"({unit(d['equal_split_time'])}) [bold red]does not fit memory[/] on "
                      f"{', '.join(d['equal_split_violations'])} (*)")
    else:
        console.print(f"iteration time: plan {unit(d['iteration_time'])}, equal split {unit(d['equal_split_time'])}"
                      + (f" → {d['gain']:.2f}× faster" if d["gain"] else ""))
