"""Run a job of local rank processes and collect their results.

A hook that trains across processes (the parameter server of
:mod:`dlsched.hooks.torch_ps`, or e.g. an all-reduce hook) has the same
launcher: :func:`launch_ranks` writes a JSON config into a fresh job directory,
starts ``python -m ENTRY --config ... --rank R --init ... --out ... --parent PID``
for every rank, watches them, and returns their exit codes, stderr and results.
The rank side is :func:`rank_main`, which ``ENTRY`` calls with its own
function for running one rank.

Each rank's environment also holds what ``torchrun`` would set (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``;
:func:`~dlsched.runtime.torchrun.job_environment`), so a rank joins with
:func:`dlsched.runtime.torchrun.join`, the function a user's own ``torchrun``
script calls: this launcher is a convenience over the same code.

Lifetime (:mod:`dlsched.runtime.lifetime`): the ranks never outlive the launcher.
Each one ends within about a second of the launcher's death, even by SIGKILL;
while the job runs SIGTERM, SIGINT and SIGHUP first kill every rank, then end
the launcher with ``SystemExit(128 + signum)`` (SIGINT: ``KeyboardInterrupt``)
after removing the job directory.

Protocol of a rank: it exits 0 after writing its result with ``torch.save`` to
``--out``; on a :class:`~dlsched.errors.DlschedError` it prints one line
``dlsched: error: ...`` to stderr and exits 2, which the launcher quotes.
"""
from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dlsched.errors import DlschedError

from .lifetime import children_die_with_launcher, end_children, left_by_the_dead, say_error, watch_launcher
from .torchrun import TorchrunError, job_environment


class LaunchRefused(DlschedError):
    """Invalid launch arguments, or no job directory; nothing was started."""


class JobFailed(DlschedError):
    """A rank of a launched job failed, was killed, or ran past the limit.

    Carries ``returncodes`` and ``stderr`` (one entry per rank) and ``workdir``
    (the kept job directory, or ``None``).
    """


@dataclass
class JobResult:
    """What every rank of a finished job left: its result (``torch.load`` of its
    output file), exit code and stderr, and the kept job directory (or ``None``)."""

    results: list
    returncodes: list[int]
    stderr: list[str]
    workdir: str | None = None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (for the process group's rendezvous)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rank_command(entry: str, cfg_path: str, rank: int, init_method: str, out: str,
                 parent: int | None = None) -> list[str]:
    """The command line of one rank of module ``entry``; with ``parent`` the rank ends when that process does."""
    cmd = [sys.executable, "-m", entry, "--config", cfg_path, "--rank", str(rank), "--init", init_method,
           "--out", out]
    return cmd + ["--parent", str(parent)] if parent is not None else cmd


def rank_env(ifname: str = "lo") -> dict:
    """A rank's environment: gloo on interface ``ifname``, one OpenMP thread, this checkout importable."""
    repo = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, GLOO_SOCKET_IFNAME=ifname, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
                PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))


def launch_ranks(entry: str, config: dict, world: int, *, job_timeout: float, grace: float,
                 timeout: float | None = None, workdir: str | None = None, prefix: str = "dlsched-job-",
                 on_start=None, prefixes: list[list[str]] | None = None, env: list[dict] | None = None,
                 init_method: str | None = None, keep: bool = False, kind: str = "distributed",
                 refused: type[DlschedError] = LaunchRefused, failed: type[DlschedError] = JobFailed) -> JobResult:
    """Run ``world`` ranks of module ``entry`` as local processes and collect their results.

    Parameters
    ----------
    entry : str
        The module each rank runs (``python -m entry``), which calls :func:`rank_main`.
    config : dict
        JSON-serialisable; written to ``config.json`` in the job directory for every rank.
    world : int
        Number of ranks.
    job_timeout : float
        Default limit of the whole job in seconds.
    grace : float
        Once a rank fails, the others get this many seconds to fail cleanly.
    timeout : float, optional
        Limit of the whole job in seconds, instead of ``job_timeout``; ranks
        still running at the limit are killed.
    workdir : str, optional
        Folder in which the job directory ``prefix*`` is made (default: the
        system's temporary folder).
    prefix : str
        Start of the job directory's name.
    on_start : callable, optional
        ``on_start(procs)`` is called once all processes are started.
    prefixes : list of list of str, optional
        ``prefixes[rank]`` is prepended to a rank's command (e.g. ``ip netns exec NS``).
    env : list of dict, optional
        ``env[rank]`` replaces a rank's environment (default :func:`rank_env`);
        the torchrun variables of the rank are added to it.
    init_method : str, optional
        The process group's rendezvous, ``tcp://HOST:PORT`` (default: a free TCP port on loopback),
        given to each rank as ``MASTER_ADDR`` and ``MASTER_PORT``.
    keep : bool
        Keep the job directory (config, each rank's stderr and result file) and
        give its path as ``JobResult.workdir``, or ``workdir`` on the error. By
        default it is deleted before returning or raising.
    kind : str
        What the messages call the job (``"parameter-server"``: "parameter-server job failed: ...").
    refused, failed : type
        The error classes raised for bad arguments and for a failed job, so that
        each hook raises its own.

    Returns
    -------
    JobResult

    Raises
    ------
    refused
        Invalid arguments, or the job directory cannot be made.
    failed
        Any rank failed; the message quotes each failed rank's error line (and
        says so when the ranks were stopped at the job's limit), and the error
        carries ``returncodes``, ``stderr`` and ``workdir``.
    """
    problems = []
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                or not (math.isfinite(timeout) and timeout > 0)):
        problems.append(f"timeout must be a finite number of seconds above 0, got {timeout!r}")
    for what, per_rank in (("prefixes", prefixes), ("env", env)):
        if per_rank is not None and len(per_rank) != world:
            problems.append(f"{what} must have one entry per rank ({world}), got {len(per_rank)}")
    if init_method is not None:
        try:
            job_environment(0, world, init_method)
        except TorchrunError as e:
            problems.append(str(e))
    if problems:
        raise refused(f"invalid {kind} configuration: " + "; ".join(problems))
    try:
        tmp = job_directory(prefix, workdir)
    except OSError as e:
        raise refused(f"{workdir or tempfile.gettempdir()}: cannot create the job directory there "
                      f"({e.strerror or e})") from None
    procs: list[subprocess.Popen] = []
    # the handlers cover reading the results too, so a late SIGTERM still removes the directory
    with children_die_with_launcher(procs):
        try:
            job = _run_job(entry, config, world, tmp, procs, timeout or job_timeout, grace, on_start,
                           prefixes, env, init_method, kind, failed)
        except failed as err:
            err.workdir = tmp if keep else None
            raise
        finally:
            if not keep:
                shutil.rmtree(tmp, ignore_errors=True)
    job.workdir = tmp if keep else None
    return job


def job_directory(prefix: str, workdir: str | None = None) -> str:
    """A new job directory ``PREFIX<pid>-…`` in ``workdir`` (default: the temp folder), named after this
    process; first, those that launchers killed by SIGKILL left there go.

    Raises
    ------
    OSError
        The directory cannot be made.
    """
    folder = Path(workdir or tempfile.gettempdir())
    pattern = re.compile(re.escape(prefix) + r"(?P<pid>\d+)-\w+")
    try:
        left = [p for p in folder.iterdir() if p.is_dir() and left_by_the_dead(p.name, pattern)]
    except OSError:
        left = []
    for p in left:
        shutil.rmtree(p, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=workdir)


def _run_job(entry, config, world, tmp, procs, limit, grace, on_start, prefixes, env, init_method, kind,
             failed) -> JobResult:
    """Start the ranks in ``tmp`` (appending them to ``procs``), watch and reap them, and read their results."""
    import torch
    deadline = time.monotonic() + limit
    cfg_path = os.path.join(tmp, "config.json")
    Path(cfg_path).write_text(json.dumps(config))
    init = init_method or f"tcp://127.0.0.1:{free_port()}"
    try:
        for r in range(world):
            cmd = (prefixes[r] if prefixes else []) + rank_command(
                entry, cfg_path, r, init, os.path.join(tmp, f"rank{r}.pt"), parent=os.getpid())
            # what torchrun would set: the rank joins through env:// like a user's torchrun script
            rank_vars = {k: v for k, v in (env[r] if env else rank_env()).items()
                         if not k.startswith("TORCHELASTIC_")}  # a launcher under torchrun: its store is not ours
            rank_vars.update(job_environment(r, world, init))
            with open(os.path.join(tmp, f"rank{r}.err"), "w") as log:
                # own session: a terminal's Ctrl-C reaches the launcher only, which then kills the group
                procs.append(subprocess.Popen(cmd, env=rank_vars, stdout=subprocess.DEVNULL,
                                              stderr=log, start_new_session=True))
        if on_start:
            on_start(procs)
        failed_at = None
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
                # a rank failed: the others get one grace period to notice and fail cleanly
                failed_at = time.monotonic()
                deadline = min(deadline, failed_at + grace)
            time.sleep(0.05)
        # ranks still running at the limit, none of them failed: the job was cut short, not broken
        stopped = failed_at is None and any(p.poll() is None for p in procs)
    finally:
        end_children(procs)
    codes = [p.returncode for p in procs]
    errs = [Path(tmp, f"rank{r}.err").read_text(errors="replace") for r in range(world)]
    if any(codes):
        lines = []
        for r, (c, e) in enumerate(zip(codes, errs)):
            if c:
                msg = [ln for ln in e.splitlines() if ln.startswith("dlsched: error:")]
                why = msg[0][len("dlsched: error: "):] if msg else (e.strip().splitlines() or ["no message"])[-1]
                lines.append(f"rank {r} exited with {c}: {why}" if c > 0 else f"rank {r} was killed (signal {-c})")
        if stopped:
            lines.append(f"the job ran past its limit of {limit:g} s and was stopped")
        err = failed(f"{kind} job failed: " + "; ".join(lines))
        err.returncodes, err.stderr = codes, errs
        raise err
    results = [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False) for r in range(world)]
    return JobResult(results, codes, errs)


def rank_main(argv, description: str, run_rank: Callable[[dict, int, str], object]) -> None:
    """The entry point of one rank: run ``run_rank(config, rank, init_method)``, save its result, exit.

    Never returns: exits 0 after writing the result to ``--out``, 2 with one
    ``dlsched: error:`` line on a :class:`~dlsched.errors.DlschedError`, 1 (with
    a traceback) on anything else. It skips interpreter teardown, which can block
    on dead peers.
    """
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--config", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parent", type=int, help="pid of the launcher: this rank ends as soon as it does")
    a = ap.parse_args(argv)
    if a.parent is not None:
        # first, so the rank never outlives a launcher killed during start-up
        watch_launcher(a.parent, name="this rank")
    try:
        import torch
        result = run_rank(json.loads(Path(a.config).read_text()), a.rank, a.init)
        tmp = a.out + ".tmp"
        torch.save(result, tmp)
        os.replace(tmp, a.out)
    except DlschedError as e:
        say_error(str(e))
        os._exit(2)
    except BaseException as e:  # noqa: BLE001 - never hang in teardown
        import traceback
        traceback.print_exc()
        say_error(f"rank {a.rank}: {type(e).__name__}: {e}")
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip process-group teardown, which can block on dead peers
