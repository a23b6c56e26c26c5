"""``dlsched plan-batch MODEL``: memory-bounded batch plans, for one device or per worker (DESIGN §5).

The plan: :func:`dlsched.answers.plan_batch.plan_batch`; the cluster file: :mod:`dlsched.planning.cluster_file`.
"""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.answers.options import ModelSpec, OracleSpec
from dlsched.answers.plan_batch import Fastest, Measure, Memory, Workers
from dlsched.devices import DEVICES
from dlsched.errors import DlschedError

from .common import BYTES, FRACTION, POSITIVE_INT, emit_json, gather, max_work_option


def _memory(memory, margin, optimizer, dtype):
    given = click.get_current_context().get_parameter_source("margin").name != "DEFAULT"  # else the file's
    return Memory(memory, margin if given else None, optimizer, dtype)


def _measure(measure, measure_batches, device):
    try:
        return Measure([int(x) for x in measure_batches.split(",") if x.strip()] if measure else None, device)
    except ValueError:
        raise DlschedError(f"--measure-batches {measure_batches!r}: expected comma-separated integers") from None


def _fastest(algorithms, batch_range, classes, workspace):
    try:
        lo_hi = tuple(int(x) for x in batch_range.split(":")) if batch_range else None
        if lo_hi is not None and len(lo_hi) != 2:
            raise ValueError
    except ValueError:
        raise DlschedError(f"--batch-range {batch_range!r}: expected LO:HI, e.g. 16:1024") from None
    return Fastest(algorithms, lo_hi, classes, workspace)


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
@click.option("--device", type=click.Choice(list(DEVICES)), default="cpu", show_default=True,
              help="Where --measure runs its steps.")
@click.option("--oracle", default=None, help="Time oracle of MODEL: Σ compute times, scaled linearly in batch.")
@click.option("--batch", type=POSITIVE_INT, default=None, help="Batch to import MODEL at (static).")
@click.option("--buffers", is_flag=True, help="torch: also treat registered buffers as parameters.")
@click.option("--global-batch", type=POSITIVE_INT, default=None, help="Global batch X to split over workers.")
@click.option("--worker", "workers", multiple=True, help="NAME:MEMORY[:SPEED], repeatable (heterogeneous plan).")
@click.option("--cluster", default=None, help="Cluster YAML file (see the command's module docs).")
@click.option("--algorithms", type=click.Path(dir_okay=False), default=None,
              help="Per-layer algorithm table (layer, algorithm, batch, time_s, workspace_bytes): the fastest batch.")
@click.option("--batch-range", default=None, help="With --algorithms: batches LO:HI to consider [default: the table's].")
@click.option("--classes", type=POSITIVE_INT, default=None, help="With --algorithms: classes; smaller batches refused.")
@click.option("--workspace", type=click.Choice(["sum", "max"]), default="sum", show_default=True,
              help="With --algorithms: layers' workspaces add up (paper Eq. 6), or share one buffer.")
@max_work_option(limits.PLAN_BATCH)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@gather("model", lambda model, batch, buffers: ModelSpec(model, batch=batch, buffers=buffers),
        ("model", "batch", "buffers"))
@gather("oracle", lambda oracle: OracleSpec(oracle), ("oracle",))
@gather("memory", _memory, ("memory", "margin", "optimizer", "dtype"))
@gather("measure", _measure, ("measure", "measure_batches", "device"))
@gather("workers", Workers, ("global_batch", "workers", "cluster"))
@gather("fastest", _fastest, ("algorithms", "batch_range", "classes", "workspace"))
def plan_batch(model, oracle, memory, measure, workers, fastest, max_work, as_json):
    """Largest batch that fits a device's memory, or per-worker batches for a
    heterogeneous cluster (LB-BSP).

    M(b) = params·(2 + k_opt) + b·(activations + workspace) per sample. The
    static estimate loads MODEL in training mode and reads the forward outputs
    the backward pass keeps; --measure runs real training steps of a PyTorch
    factory and fits peak memory linearly in the batch.

    Heterogeneous: --global-batch X with --worker NAME:MEMORY[:SPEED] (repeat)
    or --cluster cluster.yaml. Each worker's time is t_ref(b)/speed, with t_ref
    from --oracle (seconds), --measure (measured step times) or a unit curve.

    Fastest batch (paper 003 §3.1): --algorithms table.csv --classes N picks,
    per batch, each layer's algorithm under the memory left for workspace and
    answers the batch with the most samples/s.
    """
    from dlsched.answers.plan_batch import SplitAnswer
    from dlsched.answers.plan_batch import plan_batch as plan
    from dlsched.planning.fastest_batch import FastestBatch

    from . import plan_batch_views as views

    answer = plan(model, oracle, memory, measure, workers, fastest, max_work)
    if as_json:
        emit_json(answer.to_dict())
    elif isinstance(answer, SplitAnswer):
        views.print_split(answer)
    elif isinstance(answer, FastestBatch):
        views.print_fastest(answer)
    else:
        views.print_device(answer)
