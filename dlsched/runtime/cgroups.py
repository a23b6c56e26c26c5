"""CPU taken away for real: cgroup v1 ``cpu`` cgroups of our own, with a CFS quota.

A worker made slow by :class:`CpuCgroup` runs at most ``share`` of one core:
the kernel's CFS bandwidth control lets the cgroup's tasks run
``cpu.cfs_quota_us`` microseconds in every ``cpu.cfs_period_us``, then
throttles them until the next period (DESIGN §5.1). The cgroup is ours alone
(a fresh, unique directory under the ``cpu`` hierarchy), its quota may change
while the worker runs, and it is removed afterwards (its tasks first go back to
the parent), even on error.

The period is short (10 ms by default) so that an iteration of tens of
milliseconds sees the average share, not one long burst and one long stall.

:func:`cpu_share` is the other side: what share of the CPU this process may
use, read from ``/proc/self/cgroup`` and the cgroup's quota files.

Examples
--------
>>> share_of(50_000, 100_000), share_of(-1, 100_000, cpus=2)
(0.5, 2.0)
>>> with CpuCgroup(0.25) as cg:                      # doctest: +SKIP
...     cg.add(pid); cg.set_share(0.125)
"""
from __future__ import annotations

import errno
import os
import re
import time
import uuid
from pathlib import Path

from dlsched.errors import DlschedError

from .lifetime import left_by_the_dead

#: where the cgroup v1 ``cpu`` controller is mounted
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
#: the CFS period of our cgroups, in microseconds
PERIOD_US = 10_000
#: the kernel's smallest quota, in microseconds
MIN_QUOTA_US = 1_000


class CgroupError(DlschedError):
    """A cgroup cannot be created, changed or removed (not root, no ``cpu`` controller, bad share)."""


def unavailable(root: Path = CPU_ROOT) -> str | None:
    """Why our own ``cpu`` cgroups cannot be made here, or ``None`` when they can.

    Examples
    --------
    >>> unavailable(Path("/nonexistent/cpu"))
    '/nonexistent/cpu: no cgroup v1 cpu controller is mounted there'
    """
    if not (root / "cpu.cfs_quota_us").exists():
        return f"{root}: no cgroup v1 cpu controller is mounted there"
    if not os.access(root, os.W_OK):
        return f"{root}: not writable (creating a cgroup needs root)"
    probe = root / f"dlsched-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:  # a container may show the hierarchy yet refuse new cgroups
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"{root}: cannot create a cgroup there ({e.strerror or e})"
    return None


def share_of(quota_us: int, period_us: int, cpus: int | None = None) -> float:
    """The CPU share, in cores, of quota ``quota_us`` per ``period_us``; no quota (−1) is every CPU."""
    if quota_us < 0:
        return float(cpus or len(os.sched_getaffinity(0)))
    return quota_us / period_us


def _cpu_path(proc_cgroup: str) -> str | None:
    """The ``cpu`` controller's cgroup path in a ``/proc/PID/cgroup`` text (v1 lines ``ID:CONTROLLERS:PATH``)."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            return parts[2]
    return None


def cpu_share(pid: int | str = "self", root: Path = CPU_ROOT) -> float:
    """The CPU share, in cores, that process ``pid`` may use: the tightest quota on its cgroup's path,
    or the CPUs it may run on when no quota applies (or cgroups cannot be read)."""
    cpus = len(os.sched_getaffinity(0))
    try:
        path = _cpu_path(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        path = None
    share = float(cpus)
    if path is None:
        return share
    d = root / path.lstrip("/")
    while True:
        try:
            quota = int((d / "cpu.cfs_quota_us").read_text())
            period = int((d / "cpu.cfs_period_us").read_text())
            share = min(share, share_of(quota, period, cpus))
        except (OSError, ValueError):
            pass
        if d == root or root not in d.parents:
            return share
        d = d.parent


def memory_fraction(pid: int | str = "self") -> float:
    """The fraction of the machine's memory that process ``pid`` holds (resident set over MemTotal)."""
    try:
        rss = next(int(ln.split()[1]) for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if ln.startswith("VmRSS:"))
        total = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                     if ln.startswith("MemTotal:"))
        return rss / total
    except (OSError, StopIteration, ValueError):
        return 0.0


# A cgroup of ours: dlsched…-<owner pid>-<8 hex digits> (CpuCgroup's own naming, the name starting dlsched).
OURS = re.compile(r"dlsched[\w.-]*-(?P<pid>\d+)-[0-9a-f]{8}")


def sweep(root: Path = CPU_ROOT) -> list[str]:
    """Remove the cgroups of ours whose owner is dead (a SIGKILLed run never removed them); return their names.

    Their tasks went with the run, so each is empty and ``rmdir`` takes it; one that still holds a task is
    left alone.
    """
    gone = []
    try:
        entries = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return gone
    for path in entries:
        if left_by_the_dead(path.name, OURS):
            try:
                path.rmdir()
                gone.append(path.name)
            except OSError:
                pass
    return gone


class CpuCgroup:
    """A ``cpu`` cgroup of our own, limited to ``share`` of one core; a context manager that removes it.

    Parameters
    ----------
    share : float or None
        Cores the cgroup's tasks may use (0.125 = 12.5% of one core); ``None``: no limit.
    name : str, optional
        Start of the directory's name, ``dlsched…`` (what :func:`sweep` looks for); a suffix of the
        owner's pid and a unique part is added.
    root : Path
        Mount point of the ``cpu`` controller.
    period_us : int
        The CFS period.

    Raises
    ------
    CgroupError
        Cgroups are unavailable here (the message says why), or ``share`` is not above 0.
    """

    def __init__(self, share: float | None = None, name: str = "dlsched", root: Path = CPU_ROOT,
                 period_us: int = PERIOD_US):
        why = unavailable(root)
        if why:
            raise CgroupError(f"cannot create a cpu cgroup: {why}")
        self.root, self.period_us = root, period_us
        sweep(root)  # what runs killed by SIGKILL left
        self.path = root / f"{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(str(period_us))
        except OSError as e:
            self.remove()
            raise CgroupError(f"{self.path}: cannot create the cgroup ({e.strerror or e})") from None
        try:
            self.set_share(share)
        except CgroupError:
            self.remove()
            raise

    def set_share(self, share: float | None) -> None:
        """Limit the cgroup to ``share`` cores from now on (``None``: no limit).

        Raises
        ------
        CgroupError
            ``share`` is not a number above 0, or is below the kernel's smallest quota.
        """
        if share is None:
            quota = -1
        else:
            if not isinstance(share, (int, float)) or isinstance(share, bool) or not share > 0:
                raise CgroupError(f"a CPU share must be a number of cores above 0, got {share!r}")
            quota = round(share * self.period_us)
            if quota < MIN_QUOTA_US:
                raise CgroupError(f"a CPU share of {share:g} core is {quota} µs per {self.period_us} µs period, "
                                  f"below the kernel's smallest quota ({MIN_QUOTA_US} µs)")
        self._write("cpu.cfs_quota_us", quota)
        self.share = share

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the cgroup.

        Raises
        ------
        CgroupError
            The process is gone or cannot be moved.
        """
        self._write("cgroup.procs", pid)

    def pids(self) -> list[int]:
        """The processes in the cgroup now."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self) -> None:
        """Move the cgroup's processes back to the parent and delete it; never raises."""
        if not self.path.exists():
            return
        for _ in range(50):
            for pid in self.pids():
                try:
                    (self.path.parent / "cgroup.procs").write_text(str(pid))
                except OSError:
                    pass  # already exited
            try:
                self.path.rmdir()
                return
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    return
                time.sleep(0.02)  # a dying task still counts for a moment

    def _write(self, what: str, value) -> None:
        try:
            (self.path / what).write_text(str(value))
        except OSError as e:
            raise CgroupError(f"{self.path / what}: cannot write {value} ({e.strerror or e})") from None

    def __enter__(self) -> CpuCgroup:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
