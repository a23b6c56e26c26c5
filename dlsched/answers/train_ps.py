"""The ``train-ps`` answer: a real parameter-server run whose per-worker batches follow a policy (LB-BSP, DESIGN §5.1).

:func:`train_ps` runs the job (:func:`dlsched.jobs.policy_run.train_with_policy`:
server 0's batch-size manager re-splits the global batch every iteration,
workers optionally throttled by cgroup CPU quotas) and answers with its
summary; with ``plot`` it also draws each worker's batch size and busy time
over the iterations (:func:`dlsched.formats.batch_plot.plot_batches`).

Examples
--------
>>> Cluster(workers=2, quotas=(1.0, 0.25)).quotas, Batching().batch_policy
((1.0, 0.25), 'bsp')
>>> out = train_ps("examples/torch_models.py:small_cnn", Cluster(workers=2))  # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass

from dlsched import limits
from dlsched.atomic import check_writable
from dlsched.formats.batch_plot import plot_batches
from dlsched.jobs.policy_run import frames, train_with_policy


@dataclass(frozen=True)
class Cluster:
    """Workers and servers, the cores each worker may use (``None``: unthrottled), and quota swaps
    ``ITERATION:I,J`` (workers ``I`` and ``J`` swap quotas when server 0 reaches ``ITERATION``)."""

    workers: int = 4
    servers: int = 1
    quotas: tuple[float, ...] | None = None
    swaps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Batching:
    """The global batch X and the policy that splits it across the workers every iteration (``bsp``,
    ``static``, ``lbbsp-cpu`` with its speed ``predictor``, ``lbbsp-gpu``)."""

    global_batch: int = 64
    batch_policy: str = "bsp"
    predictor: str = "ema"


@dataclass(frozen=True)
class Training:
    """Iterations, SGD's learning rate, the seed, and the longest any single wait may take (seconds)."""

    iterations: int = 50
    lr: float = 0.01
    seed: int = 0
    timeout: float = 60.0


def train_ps(model: str, cluster: Cluster = Cluster(), batching: Batching = Batching(),
             training: Training = Training(), plot: str | None = None, max_work: int | None = None) -> dict:
    """Train ``model`` (a factory, ``examples/torch_models.py:small_cnn``) for real, its batches split by ``batching``.

    Returns
    -------
    dict
        :func:`~dlsched.jobs.policy_run.train_with_policy`'s summary:
        ``config``, ``history``, ``applied``, ``phases``, ``warnings`` and,
        with quotas, ``prediction``.

    Raises
    ------
    DlschedError
        Bad settings, more ranks or rank-steps than ``max_work`` (default
        :data:`dlsched.limits.RANKS`, :data:`~dlsched.limits.REAL_STEPS`) or a
        plot that cannot be written (all before anything starts), no cgroups
        here while quotas are given, or the job failed.
    """
    ranks = cluster.workers + cluster.servers
    limits.check_work(limits.ranks_work(ranks, f"{limits.plural(cluster.workers, 'worker')} + "
                                                 f"{limits.plural(cluster.servers, 'server')}"),
                      limits.RANKS, "train-ps", max_work)
    limits.check_work(limits.real_steps_work(ranks, training.iterations), limits.REAL_STEPS, "train-ps", max_work)
    check_writable(plot)  # before any process starts, not after the run
    quotas = list(cluster.quotas) if cluster.quotas is not None else None
    out = train_with_policy(model, workers=cluster.workers, servers=cluster.servers,
                            global_batch=batching.global_batch, policy=batching.batch_policy,
                            predictor=batching.predictor, quotas=quotas, swaps=list(cluster.swaps),
                            iterations=training.iterations, lr=training.lr, seed=training.seed,
                            timeout=training.timeout)
    if plot:
        steps, iters = frames({batching.batch_policy: out})
        plot_batches(steps, plot, iterations=iters,
                     title=f"{model} · {cluster.workers} workers · X = {batching.global_batch}"
                           + (f" · quotas {','.join(f'{q:g}' for q in quotas)}" if quotas else ""))
    return out
