"""Join a job from ``torchrun``'s environment: the one way every dlsched hook's ranks meet (issue 29, item 5).

``torchrun`` (and any launcher that follows its contract) starts each rank with
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``
in its environment. :func:`join` reads them, checks them, and initialises the
default gloo process group through ``env://`` with a bounded timeout; outside
``torchrun`` it raises :class:`NotUnderTorchrun` naming the missing variable.
dlsched's own :func:`~dlsched.runtime.launcher.launch_ranks` sets the same
variables for its ranks (:func:`job_environment`), so ``launch_local`` and a
user's ``torchrun`` script run the same code.

A hook that needs its own connection to the job's key-value store (the partial
collectives' progress thread blocks in ``wait`` on one connection while the
training loop ``add``\\ s on another) opens one with :func:`store_client`: a
``TCPStore`` client of ``MASTER_ADDR:MASTER_PORT``. That address is the store
in both cases, checked on torch 2.13: under ``torchrun`` the agent of node 0
hosts it (``TORCHELASTIC_USE_AGENT_STORE=True``, also with ``--rdzv-backend
c10d`` on several machines) and outlives the ranks; under ``launch_local`` rank
0 hosts it (``multi_tenant``), so rank 0 must outlast the others' last use.
Its keys are prefixed with the run id and restart count, so a restarted
``torchrun`` job (the agent's store is kept across restarts) never reads the
keys of the attempt before.

:func:`exit_on_error` is the last line of a rank: a
:class:`~dlsched.errors.DlschedError` becomes one ``dlsched: error: ...`` line
on stderr and exit code 2, without the process-group teardown that can block on
a dead peer. ``torchrun`` itself then exits 1 and names the rank's exit code 2
in its failure summary (docs/torchrun.md).

Examples
--------
>>> job_environment(1, 2, "tcp://10.77.0.1:29500")["MASTER_ADDR"], job_environment(1, 2, None)["RANK"]
('10.77.0.1', '1')
>>> job_env({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h0", "MASTER_PORT": "1"}).world_size
2
>>> job_env({"RANK": "0"})
Traceback (most recent call last):
...
dlsched.runtime.torchrun.NotUnderTorchrun: WORLD_SIZE is not set: run this script under torchrun (e.g. torchrun --nproc-per-node 2 SCRIPT), which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT

Public API: :class:`JobEnv`, :func:`job_env`, :func:`join`, :func:`store_client`,
:func:`job_environment`, :func:`exit_on_error`, :class:`TorchrunError`,
:class:`NotUnderTorchrun`, :data:`ENV_VARS`.
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from urllib.parse import urlparse

from dlsched.errors import DlschedError

from .lifetime import say_error

__all__ = ["ENV_VARS", "JobEnv", "NotUnderTorchrun", "TorchrunError", "exit_on_error", "job_env",
           "job_environment", "join", "store_client"]

#: what a rank needs from its launcher, as torchrun names them
ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class TorchrunError(DlschedError):
    """Joining the job failed: bad launcher variables, or the rendezvous did not complete in time."""


class NotUnderTorchrun(TorchrunError):
    """A launcher variable is missing: the script was not started by torchrun (or launch_local)."""


@dataclass(frozen=True)
class JobEnv:
    """This rank's place in the job, as its launcher set it."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    #: torchrun's run id and restart count (``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_RESTART_COUNT``)
    run_id: str = "none"
    restart: int = 0

    def key_prefix(self, name: str) -> str:
        """The store namespace of ``name`` in this attempt of this run."""
        return f"dlsched/{self.run_id}/{self.restart}/{name}/"


def job_env(environ=None) -> JobEnv:
    """Read and check the launcher's variables from ``environ`` (default ``os.environ``).

    Raises
    ------
    NotUnderTorchrun
        One of :data:`ENV_VARS` is not set (the first missing one is named).
    TorchrunError
        One is set to something unusable (not a whole number, a rank out of range).
    """
    environ = os.environ if environ is None else environ
    for var in ENV_VARS:
        if not environ.get(var):
            raise NotUnderTorchrun(
                f"{var} is not set: run this script under torchrun (e.g. torchrun --nproc-per-node 2 SCRIPT), "
                f"which sets {', '.join(ENV_VARS[:-1])} and {ENV_VARS[-1]}")
    nums = {}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
        try:
            nums[var] = int(environ.get(var, "0"))
        except ValueError:
            raise TorchrunError(f"{var} must be a whole number, got {environ[var]!r}") from None
    if nums["WORLD_SIZE"] < 1 or not 0 <= nums["RANK"] < nums["WORLD_SIZE"] or nums["LOCAL_RANK"] < 0:
        raise TorchrunError(f"RANK={nums['RANK']} and LOCAL_RANK={nums['LOCAL_RANK']} must be ranks of a job of "
                            f"WORLD_SIZE={nums['WORLD_SIZE']} processes")
    if not 0 < nums["MASTER_PORT"] < 2**16:
        raise TorchrunError(f"MASTER_PORT must be a TCP port, got {nums['MASTER_PORT']}")
    return JobEnv(nums["RANK"], nums["WORLD_SIZE"], nums["LOCAL_RANK"], environ["MASTER_ADDR"],
                  nums["MASTER_PORT"], environ.get("TORCHELASTIC_RUN_ID") or "none",
                  nums["TORCHELASTIC_RESTART_COUNT"])


def _seconds(value: float):
    from datetime import timedelta
    return timedelta(seconds=value)


def join(timeout: float, backend: str = "gloo") -> JobEnv:
    """Join the job this process was launched into: the default process group, through ``env://``.

    Every collective and store wait of the group is bounded by ``timeout``
    seconds. Already joined (a hook called after the user's own
    ``init_process_group``): checks the group is this job's and returns.

    Raises
    ------
    NotUnderTorchrun, TorchrunError
        The launcher's variables are missing or wrong, the group already
        joined is another one, or the rendezvous failed or timed out.
    """
    import torch.distributed as dist
    env = job_env()
    if dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size()) != (env.rank, env.world_size):
            raise TorchrunError(f"the process group already joined is rank {dist.get_rank()} of "
                                f"{dist.get_world_size()}, not RANK={env.rank} of WORLD_SIZE={env.world_size}")
        return env
    try:
        dist.init_process_group(backend, init_method="env://", rank=env.rank, world_size=env.world_size,
                                timeout=_seconds(timeout))
    except Exception as e:  # noqa: BLE001 - the store's and gloo's errors become one message
        detail = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        raise TorchrunError(f"rank {env.rank}: could not join the job at {env.master_addr}:{env.master_port} "
                            f"within {timeout:g} s ({detail})") from None
    return env


def store_client(env: JobEnv, timeout: float, name: str):
    """A new connection to the job's store, its keys in ``name``'s namespace of this run (see the module doc).

    Raises
    ------
    TorchrunError
        The store cannot be reached within ``timeout`` seconds.
    """
    import torch.distributed as dist
    try:
        store = dist.TCPStore(env.master_addr, env.master_port, None, False, _seconds(timeout))
    except Exception as e:  # noqa: BLE001
        raise TorchrunError(f"rank {env.rank}: cannot reach the job's store at {env.master_addr}:"
                            f"{env.master_port} within {timeout:g} s ({str(e).splitlines()[0][:300]})") from None
    return dist.PrefixStore(env.key_prefix(name), store)


def job_environment(rank: int, world: int, init_method: str | None, local_rank: int | None = None) -> dict:
    """The variables a launcher sets for rank ``rank`` of ``world`` meeting at ``init_method``
    (``tcp://HOST:PORT``; ``None``: only ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``).

    Raises
    ------
    TorchrunError
        ``init_method`` is not ``tcp://HOST:PORT``.
    """
    out = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank if local_rank is None else local_rank),
           "LOCAL_WORLD_SIZE": str(world)}
    if init_method is None:
        return out
    url = urlparse(init_method)
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme != "tcp" or not url.hostname or not port:
        raise TorchrunError(f"the rendezvous must be tcp://HOST:PORT, got {init_method!r}")
    return dict(out, MASTER_ADDR=url.hostname, MASTER_PORT=str(port))


def leave() -> None:
    """End this rank now that its work is done: flush stdout and stderr, then ``os._exit(0)``.

    The interpreter's teardown with gloo's threads still alive aborts now and then ("terminate called without an
    active exception": about one run in eight with FSDP2's async all-gathers here, once in CI with plain DDP);
    the cause was not found, and dlsched's own ranks end this way too.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@contextlib.contextmanager
def exit_on_error(prefix: str = ""):
    """Around a rank's work: a :class:`~dlsched.errors.DlschedError` prints ``dlsched: error: MESSAGE`` on
    stderr and ends the process with code 2 at once (``os._exit``: the process group's teardown can block on a
    dead peer). Anything else propagates (torchrun shows its traceback)."""
    try:
        yield
    except DlschedError as e:
        say_error(f"{prefix}{e}")
        sys.stdout.flush()
        os._exit(2)
