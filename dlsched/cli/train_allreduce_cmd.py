"""``dlsched train-allreduce``: train for real with DDP or eager-SGD's solo / majority all-reduce."""
from __future__ import annotations

import click

from dlsched import limits
from dlsched.answers import train_allreduce as answer

from .common import (DURATION, NONNEG_INT, POSITIVE_DURATION, POSITIVE_FLOAT, POSITIVE_INT, SEED, emit_json, gather,
                     max_work_option)
from .train_allreduce_views import render


@click.command("train-allreduce")
@click.option("--collective", default="ddp,solo,majority", show_default=True,
              help="ddp (torch's DistributedDataParallel, synchronous), solo, majority, full (the partial "
                   "collective activated by the last arrival: synchronous), or several separated by commas: one "
                   "real job each, side by side.")
@click.option("--processes", type=click.IntRange(min=2), default=4, show_default=True,
              help="Local processes on gloo (CPU).")
@click.option("--iterations", type=POSITIVE_INT, default=50, show_default=True, help="Steps per process.")
@click.option("--imbalance", default=None,
              help="Injected by sleeping in the step, as `simulate` takes it: random:k=1:delay=20ms, "
                   "skew:linear:10ms:80ms, rotate:…, speed:…, lognormal:…, trace:FILE.csv [default: none].")
@click.option("--step-pad", type=DURATION, default=0.0,
              help="Pad every step's compute to this time by sleeping (e, e.g. 41ms) [default: 0].")
@click.option("--model-sync-every", type=NONNEG_INT, default=0, show_default=True,
              help="Average the replicas every K steps (0: never).")
@click.option("--sync-every", type=NONNEG_INT, default=0, show_default=True,
              help="The limiter of eager-SGD's code: every N-th solo or majority round is synchronous (0: never).")
@click.option("--barrier", is_flag=True, help="A barrier before every iteration (the Fig. 9 micro-benchmark).")
@click.option("--dim", type=POSITIVE_INT, default=8192, show_default=True, help="Hyperplane dimensions.")
@click.option("--batch", type=POSITIVE_INT, default=256, show_default=True, help="Samples per process and step.")
@click.option("--lr", type=POSITIVE_FLOAT, default=0.02, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seeds data, imbalance and initiators.")
@click.option("--timeout", type=POSITIVE_DURATION, default=30.0,
              help="Longest any single wait may take; a dead or stalled process ends the job [default: 30s].")
@max_work_option(limits.RANKS, limits.REAL_STEPS)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@gather("run", answer.Run, ("processes", "iterations", "seed", "timeout"))
@gather("load", answer.Load, ("imbalance", "step_pad", "barrier"))
@gather("regression", answer.Regression, ("dim", "batch", "lr", "model_sync_every", "sync_every"))
def train_allreduce(collective, run, load, regression, max_work, as_json):
    """Train a hyperplane regression (eager-SGD §7.2.1) for real on PROCESSES local gloo processes.

    Each collective runs as its own job: `ddp` is torch's DistributedDataParallel
    (every step waits for the slowest process); `solo` lets the first process to
    finish a step trigger the all-reduce, `majority` a randomly drawn one, and the
    others contribute what they have (eager-SGD, Algorithm 2). Reports rounds of
    the global model per second, the number of active processes (NAP), the
    staleness of the gradients (index lag, and the model's age), and the
    validation MSE of rank 0's replica.
    Compare with `dlsched simulate --step-time E --imbalance ... --compare
    allreduce,solo,majority`.
    """
    out = answer.train_allreduce([c.strip() for c in collective.split(",")], run, load, regression, max_work)
    if as_json:
        emit_json(out)
        return
    render(out, regression)
