"""A parameter-server job whose workers' CPU is taken away for real, on a schedule (DESIGN §5.1).

:func:`train_throttled` runs :func:`~dlsched.hooks.torch_ps.launch_local` with
every worker in a ``cpu`` cgroup of its own (:class:`~dlsched.runtime.cgroups.CpuCgroup`).
The workers start unlimited (so importing torch is not slowed down); once
server 0 says it is in iteration 0 (its progress file) each worker's quota is
set to its share, and a :class:`QuotaChange` takes effect as soon as server 0
reaches its iteration: e.g. two workers swap quotas at iteration 100. The
cgroups are removed afterwards, whatever happens.

Examples
--------
>>> parse_changes(["100:0,1"], [0.5, 0.25, 0.125, 0.125])
[QuotaChange(iteration=100, shares=[0.25, 0.5, 0.125, 0.125])]
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import threading
import time
from dataclasses import dataclass, field

from dlsched.errors import DlschedError
from dlsched.runtime.batch_manager import read_progress
from dlsched.runtime.cgroups import CpuCgroup
from dlsched.runtime.launcher import job_directory


@dataclass
class QuotaChange:
    """From server 0's iteration ``iteration`` on, worker ``i`` may use ``shares[i]`` cores (``None``: no limit)."""

    iteration: int
    shares: list


@dataclass
class ThrottledRun:
    """A :class:`~dlsched.hooks.torch_ps.PSRun` and when each quota change took effect.

    ``applied`` holds ``(iteration server 0 was in, shares)`` for the initial
    shares and every change, in order.
    """

    run: object
    applied: list = field(default_factory=list)


def _shares_problem(shares, workers: int) -> str | None:
    if len(shares) != workers:
        return f"{len(shares)} CPU quotas for {workers} workers; give one per worker"
    bad = [s for s in shares if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float))
                                                  or not s > 0)]
    if bad:
        return f"a CPU quota must be a share of a core above 0 (e.g. 0.25), got {bad[0]!r}"
    return None


def parse_changes(specs: list[str], shares: list) -> list[QuotaChange]:
    """Quota swaps ``ITERATION:I,J`` (workers ``I`` and ``J`` swap quotas at ``ITERATION``), applied in order.

    Raises
    ------
    DlschedError
        A malformed spec or a worker index out of range.
    """
    out, current = [], list(shares)
    for spec in specs:
        try:
            it, pair = spec.split(":")
            i, j = (int(x) for x in pair.split(","))
            it = int(it)
        except ValueError:
            raise DlschedError(f"a quota swap is ITERATION:I,J (e.g. 100:0,1), got {spec!r}") from None
        if it < 1 or not (0 <= i < len(current) and 0 <= j < len(current)) or i == j:
            raise DlschedError(f"quota swap {spec!r}: needs an iteration ≥ 1 and two different worker indices "
                               f"below {len(current)}")
        current[i], current[j] = current[j], current[i]
        out.append(QuotaChange(it, list(current)))
    return out


def train_throttled(cfg, shares: list, changes: list[QuotaChange] = (), timeout: float | None = None,
                    poll: float = 0.002) -> ThrottledRun:
    """Run ``cfg`` with worker ``i`` limited to ``shares[i]`` cores, changed by ``changes`` during the run.

    Parameters
    ----------
    cfg : PSConfig
    shares : list of float or None
        Cores per worker (``None``: no limit).
    changes : list of QuotaChange
        Applied when server 0 reaches each one's iteration.
    timeout : float, optional
        Limit of the whole job (see :func:`~dlsched.hooks.torch_ps.launch_local`).
    poll : float
        Seconds between reads of server 0's progress.

    Raises
    ------
    DlschedError
        Wrong number of shares, a share not above 0, or a change past the last iteration.
    CgroupError
        No cgroups here (the message says why).
    PSTrainingError
        The job failed.
    """
    from dlsched.hooks.torch_ps import launch_local
    problems = [p for p in [_shares_problem(shares, cfg.workers)] + [_shares_problem(c.shares, cfg.workers)
                                                                       for c in changes] if p]
    late = [c.iteration for c in changes if c.iteration >= cfg.iterations]
    if late:
        problems.append(f"a quota change at iteration {late[0]} never happens in {cfg.iterations} iterations")
    if problems:
        raise DlschedError("invalid throttled run: " + "; ".join(problems))
    tmp = job_directory("dlsched-quota-")
    stop, applied = threading.Event(), []
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        groups = [stack.enter_context(CpuCgroup(None, name=f"dlsched-w{w}")) for w in range(cfg.workers)]
        cfg = dataclasses.replace(cfg, progress=os.path.join(tmp, "progress"))
        plan = [QuotaChange(0, list(shares))] + sorted(changes, key=lambda c: c.iteration)
        watcher = threading.Thread(target=_follow, args=(cfg.progress, plan, groups, stop, applied, poll),
                                   daemon=True)
        stack.callback(lambda: watcher.ident and watcher.join(5))
        stack.callback(stop.set)

        def on_start(procs):
            for g, p in zip(groups, procs[cfg.servers:]):
                g.add(p.pid)
            watcher.start()
        run = launch_local(cfg, timeout=timeout, on_start=on_start)
    return ThrottledRun(run, applied)


def _follow(progress: str, plan: list[QuotaChange], groups, stop: threading.Event, applied: list,
            poll: float) -> None:
    """Apply each change of ``plan`` once server 0's progress reaches its iteration."""
    pending = list(plan)
    while pending and not stop.is_set():
        it = read_progress(progress)
        while pending and it is not None and it >= pending[0].iteration:
            change = pending.pop(0)
            for g, s in zip(groups, change.shares):
                try:
                    g.set_share(s)
                except DlschedError:
                    pass  # the cgroup's process has exited; the run reports its own failure
            applied.append((it, list(change.shares)))
        time.sleep(poll)
