"""The ``train-allreduce`` answer: real training with DDP or eager-SGD's partial all-reduce, side by side.

:func:`train_allreduce` runs one local job of gloo processes per collective
under the same injected imbalance
(:func:`dlsched.jobs.eager_sgd.compare_collectives`) and answers with their
measurements: rounds of the global model per second, active processes,
staleness and the validation error of the hyperplane regression (eager-SGD
§7.2.1).

Examples
--------
>>> Run().processes, Load().imbalance, Regression().dim
(4, None, 8192)
>>> out = train_allreduce(("ddp", "solo"), Run(processes=4, iterations=20))  # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dlsched import limits
from dlsched.jobs.eager_sgd import compare_collectives


@dataclass(frozen=True)
class Run:
    """Local processes, steps per process, the seed (data, imbalance, initiators) and the longest any single
    wait may take (seconds)."""

    processes: int = 4
    iterations: int = 50
    seed: int = 0
    timeout: float = 30.0


@dataclass(frozen=True)
class Load:
    """The load imbalance injected by sleeping in the step (a ``simulate --imbalance`` spec, ``None``: none),
    the compute every step is padded to (seconds), and whether a barrier starts every iteration."""

    imbalance: str | None = None
    step_pad: float = 0.0
    barrier: bool = False


@dataclass(frozen=True)
class Regression:
    """The hyperplane regression trained: dimensions, samples per process and step, learning rate, how
    often the replicas are averaged (every K steps, 0: never), and the limiter (every N-th solo or majority
    round synchronous, 0: never)."""

    dim: int = 8192
    batch: int = 256
    lr: float = 0.02
    model_sync_every: int = 0
    sync_every: int = 0


def train_allreduce(collectives: Sequence[str], run: Run = Run(), load: Load = Load(),
                    regression: Regression = Regression(), max_work: int | None = None) -> dict:
    """One real job per collective (``ddp``, ``solo``, ``majority``, ``full``), under the same imbalance.

    Returns
    -------
    dict
        ``processes``, ``iterations``, ``imbalance``, ``step_pad_s``,
        ``activation`` and ``collectives`` (each job's measurements, with
        ``speedup`` over DDP's when ``ddp`` ran).

    Raises
    ------
    EagerConfigError
        An unknown or repeated collective, a bad setting or imbalance spec.
    WorkLimitError
        More processes or rank-steps than ``max_work`` (default
        :data:`dlsched.limits.RANKS`, :data:`~dlsched.limits.REAL_STEPS`), before any process starts.
    EagerTrainingError
        A job failed.
    """
    limits.check_work(limits.ranks_work(run.processes, f"{run.processes:,} processes"), limits.RANKS,
                      "train-allreduce", max_work)
    limits.check_work(limits.real_steps_work(run.processes, run.iterations, len(collectives)), limits.REAL_STEPS,
                      "train-allreduce", max_work)
    return compare_collectives(list(collectives), run.processes, run.iterations, imbalance=load.imbalance,
                               step_pad=load.step_pad, seed=run.seed, dim=regression.dim, batch=regression.batch,
                               lr=regression.lr, model_sync_every=regression.model_sync_every,
                               sync_every=regression.sync_every,
                               barrier=load.barrier, timeout=run.timeout)
