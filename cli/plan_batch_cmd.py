"""``dlsched plan-batch MODEL``: memory-bounded batch plans, for one device or per worker (DESIGN §5).

The plan: :func:`dlsched.planning.batch_job.run_plan_batch`; the cluster file: :mod:`dlsched.planning.cluster_file`.
"""
from __future__ import annotations

import click

from dlsched import limits

from .common import BYTES, FRACTION, POSITIVE_INT, console, emit_json, fmt_bytes, fmt_seconds, max_work_option


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
    from dlsched.planning.batch_job import SplitAnswer, run_plan_batch

    try:
        measured = [int(x) for x in measure_batches.split(",") if x.strip()] if measure else None
    except ValueError:
        raise DlschedError(f"--measure-batches {measure_batches!r}: expected comma-separated integers") from None
    given = click.get_current_context().get_parameter_source("margin").name != "DEFAULT"  # else the file's
    answer = run_plan_batch(model, memory, margin if given else None, optimizer, dtype, measured, device, oracle,
                            batch, buffers, global_batch, workers, cluster_file, max_work)
    if as_json:
        emit_json(answer.to_dict())
    elif isinstance(answer, SplitAnswer):
        _print_split(answer)
    else:
        _print_device(answer)


def _print_device(answer):
    from rich.table import Table

    plan, est, points, table = answer.plan, answer.plan.estimate, answer.measurements, answer.throughput
    console.print(f"[bold]{est.model}[/]: largest batch [bold green]{plan.batch}[/] in {fmt_bytes(plan.capacity)} "
                  f"(usable {fmt_bytes(plan.usable_bytes)} with a {plan.margin:.0%} margin), "
                  f"[bold]{est.estimate}[/] estimate, optimizer {answer.optimizer}")
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
    if table is not None:  # a linear reference is an oracle's
        source = answer.reference.source
        console.print(f"[bold]throughput[/] ({source}; an oracle scales linearly in the batch)"
                      if answer.reference.linear else f"[bold]throughput[/] ({source})")
        tt = Table()
        for c in ("batch", "step time", "samples/s", "fits"):
            tt.add_column(c, justify="right")
        for r in table.itertuples():
            tt.add_row(str(r.batch), fmt_seconds(r.time), f"{r.samples_per_s:,.1f}", "yes" if r.fits else "no")
        console.print(tt)


def _print_split(answer):
    from rich import box
    from rich.table import Table

    est, plan, seconds = answer.estimate, answer.plan, answer.time_unit == "s"
    unit = (lambda x: f"{x:.3g} s" if x >= 1 else f"{x * 1e3:.4g} ms") if seconds else (lambda x: f"{x:.4g}")
    console.print(f"[bold]{est.model}[/]: global batch {plan.global_batch} over {len(plan.workers)} workers, "
                  f"{plan.method} split, {est.estimate} memory estimate, times "
                  f"{'in seconds' if seconds else 'in reference per-sample units'} ({answer.time_source})")
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("worker", "memory", "max b", "speed", "batch", "time", "weight", "equal split"):
        t.add_column(c, justify="right" if c != "worker" else "left", no_wrap=True)
    for r, w in zip(plan.frame().itertuples(), plan.workers):
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
