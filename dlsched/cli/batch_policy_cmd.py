"""``dlsched replay-batch``: replay a speed trace against online batch-size policies (DESIGN §5.1, LB-BSP).

The replay: :func:`dlsched.answers.replay_batch.replay_batch`; the plot: :mod:`dlsched.formats.batch_plot`.
"""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.units import parse_list

from .common import NONNEG_FLOAT, POSITIVE_INT, SEED, console, emit_json, fmt_seconds, gather, max_work_option


def _source(**options):
    from dlsched.answers.replay_batch import SpeedSource

    return SpeedSource(**options)


def _pct(gap):
    return f"{gap:+.0%}" if abs(gap) >= 1 else f"{gap:+.1%}"


@click.command("replay-batch")
@click.option("--scenario", type=click.Choice(["fig8", "step", "periodic", "random", "table3"]), default=None,
              help="Built-in speed trace [default: step].")
@click.option("--trace", type=click.Path(dir_okay=False), default=None,
              help="Measured trace CSV: iteration, worker, and batch+time or speed (optional overhead, cpu, mem).")
@click.option("--policy", "policies", multiple=True,
              help="bsp, static, lbbsp-cpu[:memoryless|ema|narx], lbbsp-gpu; repeatable "
                   "[default: bsp, static, lbbsp-cpu:ema, lbbsp-gpu].")
@click.option("--global-batch", type=POSITIVE_INT, default=None, help="X [default: 128 for fig8, else 32 per worker].")
@click.option("--workers", type=POSITIVE_INT, default=None, help="Workers of a scenario; checked against a trace.")
@click.option("--iterations", type=POSITIVE_INT, default=None, help="Iterations of a scenario.")
@click.option("--noise", type=NONNEG_FLOAT, default=0.0, show_default=True,
              help="Lognormal σ on every time of a scenario (table3 has its own 3%).")
@click.option("--caps", default=None, help="Workers' largest batches, comma-separated.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="PNG of batch sizes and times over iterations, one line per worker.")
@max_work_option(limits.REPLAY)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@gather("source", _source, ("scenario", "trace", "workers", "iterations", "noise", "seed"))
def replay_batch(source, policies, global_batch, caps, plot_path, max_work, as_json):
    """Replay per-worker speeds against batch-size policies (LB-BSP, paper 002).

    Each iteration a policy turns the last per-worker batches, busy times and
    CPU/memory readings into the next batches: bsp (equal), static (one
    offline plan), lbbsp-cpu (Algorithm 1: batches proportional to predicted
    speeds) or lbbsp-gpu (Algorithm 2: leader/straggler steps). The gap is the
    iteration time over the balanced optimum of the same iteration's curves.
    """
    from dlsched.answers.replay_batch import replay_batch as replay
    from dlsched.planning.online_batch_sim import DEFAULT_POLICIES

    res = replay(source, policies or DEFAULT_POLICIES, global_batch,
                 parse_list(caps, int, "--caps", "whole numbers, e.g. 96,64,64,32"), plot_path, max_work)
    if as_json:
        emit_json(res.to_dict() | ({"plot": plot_path} if plot_path else {}))
        return
    summary = res.summary()
    console.print(f"[bold]{res.trace.name}[/]: {res.trace.description}; X = {res.global_batch}, "
                  f"{res.trace.iterations} iterations")
    rows = []
    for r in summary.itertuples():
        rows.append((r.policy, fmt_seconds(r.mean_iteration_s), "-" if r.vs_bsp != r.vs_bsp else f"{r.vs_bsp:.3f}",
                     _pct(r.mean_gap), _pct(r.final_gap), "-" if r.rmse != r.rmse else f"{r.rmse:.3g}",
                     "-" if r.fine_tune_at is None or r.fine_tune_at != r.fine_tune_at else str(int(r.fine_tune_at))))
    from rich import box
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("policy", "mean time", "vs bsp", "gap", "end gap", "RMSE", "fine at"):
        t.add_column(c, justify="left" if c == "policy" else "right", no_wrap=True)
    for row in rows:
        t.add_row(*row)
    console.print(t)
    console.print("mean time: iteration time; gap = iteration time / balanced optimum − 1 (the exact split of "
                  "that iteration's curves), "
                  "mean over all iterations, end gap over the last 10%; RMSE (samples/s): predicted against realised "
                  "speed; fine at: the iteration lbbsp-gpu entered its fine-tune phase")
    for r in summary.itertuples():
        final = r.final_batches if len(r.final_batches) <= 16 else r.final_batches[:16] + ["…"]
        console.print(f"final batches, {r.policy}: {' '.join(map(str, final))}")
    for r in summary.itertuples():
        for w in r.warnings:
            console.print(f"[yellow]warning[/] ({r.policy}): {w}")
    if plot_path:
        console.print(f"plot: {plot_path}")
