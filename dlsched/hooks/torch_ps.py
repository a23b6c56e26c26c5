"""Parameter-server training over ``torch.distributed`` with enforced transfer order
(TicTac §5, "Enforcing"; DESIGN §6).

Ranks ``0 .. S-1`` are servers, ranks ``S .. S+W-1`` workers. Each parameter lives
on server ``transfer.ps mod S`` (the priority file's ``ps`` field). Every
iteration each server sends each worker its parameters **in priority order**
(sender-side enforcement, as TicTac does at the gRPC layer), keeping at most
``window`` transfers per worker in flight (transfer ``i`` starts once ``i-window``
has completed; ``window=1`` is strictly sequential). The unordered baseline
(``unordered=True``) draws a fresh random order per worker and iteration.

On a worker every parameter's receive is posted at the start of the iteration
and completed lazily: a forward pre-hook on each module waits only for that
module's own parameters, so compute starts as soon as the first layer's weights
are in and overlaps with the transfers still in flight. After backward each
gradient goes back to its server as soon as it is accumulated; the server
averages over the workers and applies SGD (optional momentum). In inference
mode the workers only run the forward pass and send a one-element "done"
message, so iterations stay synchronous, as in TicTac's inference workload.

Per-worker batches (``PSConfig.batch_policy``, LB-BSP, DESIGN §5.1): server 0
splits each iteration's global batch of ``global_batch`` samples by a policy,
workers push gradients weighted by ``n·b_i/X`` and report their busy time and
CPU share (:mod:`~dlsched.runtime.batch_manager`); ``PSRun.batches`` holds the
history. Without a policy every worker trains on ``batch`` samples, as before.

Failure handling: every wait is bounded by ``timeout`` seconds (the process group
timeout and explicit deadlines). A peer that dies closes its gloo connections,
so the survivors' pending transfers fail; each survivor raises
:class:`PSTrainingError`, prints one line ``dlsched: error: ...`` and exits with
code 2. :func:`launch_local` kills whatever is left after ``timeout``. The ranks
also end with the launcher, even one killed by SIGKILL (:mod:`dlsched.runtime.lifetime`),
and the launcher's job directory is deleted unless ``keep=True``.

Bad input is refused before any process starts, with one message and no
traceback: :class:`PSConfig` checks every setting (:class:`PSConfigError`), and
:func:`config_from_priority_file` refuses a priority file whose fingerprint is
not that of the graph being trained, in the mode being trained
(:class:`~dlsched.errors.PriorityFileError`).

Buffers (e.g. BatchNorm running statistics) are not synchronised: use models
without buffers, or accept that each worker keeps its own.

Devices: ``device="cuda"`` keeps the model on the GPU and moves transfers through
pinned CPU staging buffers over gloo (gloo point-to-point needs CPU tensors).

Examples
--------
>>> from dlsched.hooks.torch_ps import PSConfig, launch_local, order_from_module
>>> cfg = PSConfig(model="examples/torch_models.py:small_cnn", servers=2, workers=2,
...                order=order_from_module("examples/torch_models.py:small_cnn"),
...                iterations=5, batch=4)
>>> run = launch_local(cfg)                                       # doctest: +SKIP
>>> run.params["conv1.weight"].shape, run.timeline.get(0, 0).arrival_order()[:2]  # doctest: +SKIP

Modules: :mod:`~dlsched.runtime.ps_config` (settings, priority-file checks),
:mod:`~dlsched.runtime.ps_protocol` (ranks, message tags, send order),
:mod:`~dlsched.runtime.ps_model` (the model, through :mod:`dlsched.factory`),
:mod:`~dlsched.runtime.ps_data` (synthetic batches, loss, single-process reference),
:mod:`~dlsched.hooks.ps_server`, :mod:`~dlsched.hooks.ps_worker`,
:mod:`~dlsched.runtime.ps_failures` (:class:`PSTrainingError`, bounded waits) and
:mod:`~dlsched.runtime.launcher` (local processes, job directory). This module is
the public entry and the rank entry point (``python -m dlsched.hooks.torch_ps``).

Public API: :class:`PSConfig`, :func:`check_settings`, :func:`config_from_priority_file`,
:func:`check_priority_file`, :func:`order_from_module`, :func:`build_model`,
:func:`load_factory` (that of :mod:`dlsched.factory`), :func:`run_ps_rank` (run this
process's rank of a job launched by ``torchrun``, in the user's own script; see
docs/torchrun.md), :func:`exit_on_error` (a rank's error as one line and exit 2),
:func:`ps_train` (run one rank at a given rendezvous), :func:`launch_local` (spawn
a whole cluster on localhost, whose ranks run :func:`run_ps_rank`),
:class:`PSRun`, :func:`reference_train` (the single-process equivalent),
:class:`PSTrainingError`, :class:`PSConfigError`, :func:`rank_command`,
:func:`rank_env`, :func:`free_port`; :func:`watch_launcher` is re-exported from
:mod:`dlsched.runtime.lifetime`, which keeps the ranks from outliving the
launcher. The timeline format is :mod:`dlsched.timeline`.
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field

from dlsched.factory import load_factory
from dlsched.runtime import launcher
from dlsched.runtime.launcher import free_port, rank_env
from dlsched.runtime.lifetime import watch_launcher
from dlsched.runtime.ps_config import (MAX_TIMEOUT, PSConfig, PSConfigError, check_priority_file, check_settings,
                                       config_from_priority_file)
from dlsched.runtime.ps_data import global_batch, global_target, loss_of, reference_train
from dlsched.runtime.ps_failures import PSTrainingError, seconds, transfer_failure
from dlsched.runtime.ps_model import build_model, order_from_module
from dlsched.runtime.ps_protocol import Tags, send_order
from dlsched.runtime.torchrun import TorchrunError, exit_on_error, job_env, job_environment, join
from dlsched.timeline import Timeline

from .ps_server import run_server
from .ps_worker import PSWorker

__all__ = ["MAX_TIMEOUT", "PSConfig", "PSConfigError", "PSRun", "PSTrainingError", "PSWorker", "Tags",
           "build_model", "check_priority_file", "check_settings", "config_from_priority_file", "exit_on_error",
           "free_port", "global_batch", "global_target", "launch_local", "load_factory", "loss_of", "main",
           "order_from_module", "ps_train", "rank_command", "rank_env", "reference_train", "run_ps_rank",
           "run_server", "send_order", "watch_launcher"]

#: the module every rank runs (``python -m ENTRY``): this one, whose :func:`main` is the rank entry point
ENTRY = "dlsched.hooks.torch_ps"


def run_ps_rank(cfg: PSConfig) -> dict:
    """Run this process's rank of a parameter-server job launched by ``torchrun`` (or :func:`launch_local`).

    Ranks ``0 .. S-1`` serve, the others work; ``WORLD_SIZE`` must be
    ``cfg.servers + cfg.workers``. Joins through ``env://``
    (:func:`dlsched.runtime.torchrun.join`), every wait bounded by
    ``cfg.timeout``; blocks until the job is done. Returns ``{"params": {name: tensor}}``
    on a server (its shard after training) and ``{"timeline": {...}}`` on a worker.

    In a user's script (``torchrun --nproc-per-node 3 train.py``)::

        cfg = PSConfig(model="my_model.py:factory", order=order_from_module("my_model.py:factory"),
                       servers=1, workers=2, iterations=5, batch=4)
        with exit_on_error():           # dlsched: error: ... and exit 2 on a failure
            result = run_ps_rank(cfg)

    Raises
    ------
    NotUnderTorchrun
        A launcher variable (``RANK``, ``WORLD_SIZE``, ...) is missing.
    PSConfigError
        ``WORLD_SIZE`` is not ``servers + workers``.
    PSTrainingError
        Joining the job failed, a transfer failed or timed out, or a peer died.
    ImportFailure
        The model's factory cannot be loaded or called.
    """
    import torch
    import torch.distributed as dist
    env = job_env()
    world = cfg.servers + cfg.workers
    if env.world_size != world:
        raise PSConfigError(f"the job has WORLD_SIZE={env.world_size} processes, but the configuration has "
                            f"{cfg.servers} servers + {cfg.workers} workers = {world}; start "
                            f"{world} processes (e.g. torchrun --nproc-per-node {world})")
    rank = env.rank
    torch.set_num_threads(max(1, cfg.threads))
    module, inputs = build_model(cfg)
    try:
        join(cfg.timeout)
    except TorchrunError as e:
        raise PSTrainingError(str(e)) from None
    if rank < cfg.servers:
        result = run_server(cfg, rank, module)
    else:
        result = PSWorker(cfg, rank, module, inputs).run()
    try:
        dist.barrier()  # nobody closes its connections while a peer still reads
    except Exception as e:
        raise transfer_failure(f"rank {rank}: final barrier failed", e) from None
    return result


def ps_train(rank: int, cfg: PSConfig, init_method: str) -> dict:
    """Run rank ``rank`` of the job meeting at ``init_method`` (``tcp://HOST:PORT``) in this process:
    sets the launcher variables in this process's environment, then :func:`run_ps_rank`."""
    try:
        os.environ.update(job_environment(rank, cfg.servers + cfg.workers, init_method))
    except TorchrunError as e:
        raise PSConfigError(str(e)) from None
    return run_ps_rank(cfg)


@dataclass
class PSRun:
    """The outcome of :func:`launch_local`: trained parameters (training), the
    workers' timeline, each rank's exit code and stderr, the job directory
    when it was kept (``keep=True``; ``None`` once deleted), and the batch
    sizes of a run with a batch policy."""

    params: dict
    timeline: Timeline
    returncodes: list[int]
    stderr: list[str]
    workdir: str | None = None
    #: with a batch policy, server 0's per-iteration history and the policy's warnings
    #: (:meth:`dlsched.runtime.batch_manager.BatchManager.result`), else empty
    batches: dict = field(default_factory=dict)


def rank_command(cfg_path: str, rank: int, init_method: str, out: str, parent: int | None = None) -> list[str]:
    """The command line of one rank; with ``parent`` the rank ends when that process does."""
    return launcher.rank_command(ENTRY, cfg_path, rank, init_method, out, parent)


def launch_local(cfg: PSConfig, timeout: float | None = None, workdir: str | None = None,
                 on_start=None, prefixes: list[list[str]] | None = None, env: list[dict] | None = None,
                 init_method: str | None = None, keep: bool = False) -> PSRun:
    """Run the whole job as ``S + W`` local processes and collect the results.

    Parameters
    ----------
    cfg : PSConfig
    timeout : float, optional
        Limit of the whole job in seconds (default ``2 * cfg.timeout + 60``).
        Once a rank fails, the others get ``cfg.timeout + 5`` seconds to fail
        cleanly; ranks still running at the limit are killed.
    workdir : str, optional
        Folder in which the job directory ``dlsched-ps-*`` is made (default: the
        system's temporary folder).
    on_start : callable, optional
        ``on_start(procs)`` is called once all processes are started (tests use
        it to kill one).
    prefixes : list of list of str, optional
        ``prefixes[rank]`` is prepended to a rank's command (the benchmark uses
        ``ip netns exec NS``).
    env : list of dict, optional
        ``env[rank]`` replaces a rank's environment.
    init_method : str, optional
        The process group's rendezvous (default: a free TCP port on loopback).
    keep : bool
        Keep the job directory (config, each rank's stderr and result file) and
        give its path as ``PSRun.workdir``, or ``workdir`` on the error. By
        default it is deleted before returning or raising: it holds a copy of
        every trained parameter.

    Returns
    -------
    PSRun

    Raises
    ------
    PSConfigError
        Invalid arguments, or the job directory cannot be made.
    PSTrainingError
        Any rank failed; the message quotes each failed rank's error line.

    Notes
    -----
    The ranks never outlive the launcher (:mod:`dlsched.runtime.lifetime`): each
    one ends within about a second of the launcher's death, even by SIGKILL,
    and while the job runs SIGTERM, SIGINT and SIGHUP first kill every rank,
    then end the launcher with ``SystemExit(128 + signum)`` (SIGINT: ``KeyboardInterrupt``)
    after removing the job directory. Only SIGKILL of the launcher leaves that
    directory behind (nothing runs in a SIGKILLed process); the ranks are dead
    by then, so it holds parameters only if the job had already finished.
    """
    job = launcher.launch_ranks(
        ENTRY, asdict(cfg), cfg.servers + cfg.workers, job_timeout=cfg.timeout * 2 + 60, grace=cfg.timeout + 5,
        timeout=timeout, workdir=workdir, prefix="dlsched-ps-", on_start=on_start, prefixes=prefixes, env=env,
        init_method=init_method, keep=keep, kind="parameter-server", refused=PSConfigError,
        failed=PSTrainingError)
    params, timeline = {}, Timeline()
    for res in job.results:
        params.update(res.get("params", {}))
        if "timeline" in res:
            timeline.records += Timeline.from_dict(res["timeline"]).records
    for res in job.results:
        timeline.add_sent(res.get("sent", []))
    batches = next(({k: res[k] for k in ("batches", "batch_warnings")} for res in job.results if "batches" in res), {})
    return PSRun(params, timeline, job.returncodes, job.stderr, job.workdir, batches)


def main(argv=None) -> None:
    """The entry point of one rank (``python -m dlsched.hooks.torch_ps --config ... --rank R ...``)."""
    launcher.rank_main(argv, "one rank of a dlsched parameter-server job",
                       lambda config, rank, init: run_ps_rank(PSConfig(**config)))


if __name__ == "__main__":
    sys.exit(main())
