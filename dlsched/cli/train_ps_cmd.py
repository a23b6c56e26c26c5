"""``dlsched train-ps``: a real parameter-server run whose per-worker batches follow a policy (LB-BSP, DESIGN §5.1).

The answer: :func:`dlsched.answers.train_ps.train_ps`; the tables: :mod:`.train_ps_views`.
"""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.answers import train_ps as answer
from dlsched.units import parse_list

from .common import (POSITIVE_DURATION, POSITIVE_FLOAT, POSITIVE_INT, SEED, console, emit_json, gather,
                     max_work_option)
from .train_ps_views import history_table, phase_table


def _cluster(workers: int, servers: int, cpu_quota: str | None, swaps: tuple[str, ...]) -> answer.Cluster:
    """--cpu-quota is a comma-separated list of shares of a core, one per worker."""
    quotas = parse_list(cpu_quota, float, "--cpu-quota", "shares of a core, e.g. 0.5,0.25,0.125,0.125")
    return answer.Cluster(workers, servers, None if quotas is None else tuple(quotas), tuple(swaps))


@click.command("train-ps")
@click.argument("model")
@click.option("--workers", type=POSITIVE_INT, default=4, show_default=True)
@click.option("--servers", type=POSITIVE_INT, default=1, show_default=True)
@click.option("--global-batch", type=POSITIVE_INT, default=64, show_default=True,
              help="X, split across the workers anew every iteration.")
@click.option("--batch-policy", default="bsp", show_default=True,
              help="bsp (equal split), static, lbbsp-cpu (Algorithm 1) or lbbsp-gpu (Algorithm 2).")
@click.option("--predictor", default="ema", show_default=True,
              help="lbbsp-cpu's speed predictor: memoryless, ema or narx.")
@click.option("--cpu-quota", default=None,
              help="Cores each worker may use, comma-separated (e.g. 0.5,0.25,0.125,0.125); set with the cgroup "
                   "cpu controller (needs root) [default: unthrottled].")
@click.option("--swap-at", "swaps", multiple=True,
              help="ITERATION:I,J: workers I and J swap CPU quotas when server 0 reaches ITERATION; repeatable.")
@click.option("--iterations", type=POSITIVE_INT, default=50, show_default=True)
@click.option("--lr", type=POSITIVE_FLOAT, default=0.01, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--timeout", type=POSITIVE_DURATION, default=60.0,
              help="Longest any single wait may take; a dead or stalled rank ends the job [default: 60s].")
@click.option("--every", type=POSITIVE_INT, default=None,
              help="Show every N-th iteration in the table [default: about 20 rows].")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG of each worker's batch size and busy time, and the iteration time, over iterations.")
@max_work_option(limits.RANKS, limits.REAL_STEPS)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@gather("cluster", _cluster, ("workers", "servers", "cpu_quota", "swaps"))
@gather("batching", answer.Batching, ("global_batch", "batch_policy", "predictor"))
@gather("training", answer.Training, ("iterations", "lr", "seed", "timeout"))
def train_ps(model, cluster, batching, training, every, plot_path, max_work, as_json):
    """Train MODEL (a factory, e.g. examples/torch_models.py:small_cnn) for real on a local parameter-server job.

    Server 0's batch-size manager re-splits the global batch every iteration
    from each worker's busy time (excluding waits for parameters) and its CPU
    share read from its cgroup; workers push gradients weighted by n·b_i/X so
    the update is that of the whole global batch (paper 002_*, Algorithm 3).
    With --cpu-quota each worker runs in a cgroup of its own limited to that
    share of a core, removed afterwards.
    """
    out = answer.train_ps(model, cluster, batching, training, plot=plot_path, max_work=max_work)
    if as_json:
        emit_json(out)
        return
    console.print(history_table(out, every))
    console.print(phase_table(out))
    for w in out["warnings"]:
        console.print(f"[yellow]warning:[/] {w}")
    if plot_path:
        console.print(f"plot written to {plot_path}")
