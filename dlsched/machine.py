"""The machine a measurement ran on: its CPU and how busy it was.

Every benchmark and ``dlsched validate`` print these next to their figures,
because a timing is a property of a run on one CPU under one load, not of
the tool.

>>> isinstance(cpu_model(), str) and len(load_averages().split()) == 3
True
"""
from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` with the CPU count, e.g. ``AMD EPYC 7B13 (2 CPUs)``.

    Falls back to :func:`platform.processor` (or ``unknown``) where there is
    no ``/proc/cpuinfo``.
    """
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name or platform.processor() or 'unknown'} ({os.cpu_count()} CPUs)"


def load_average() -> float:
    """The one-minute load average (``os.getloadavg``)."""
    return os.getloadavg()[0]


def load_averages() -> str:
    """The 1, 5 and 15-minute load averages as printed by ``uptime``: ``"1.25 2.18 2.57"``."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def busy_cores(seconds: float = 1.0) -> float:
    """How many cores' worth of CPU the machine spent over ``seconds`` (from ``/proc/stat``; 0 without it).

    Taken before a job starts, it is the load the job will share its cores
    with: a busy loop beside it reads about 1, a quiet machine about 0.
    """
    import time

    def snap() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # all jiffies, idle + iowait

    try:
        total0, idle0 = snap()
        time.sleep(seconds)
        total1, idle1 = snap()
    except (OSError, ValueError, IndexError):
        return 0.0
    spent = total1 - total0
    return max(0.0, 1.0 - (idle1 - idle0) / spent) * (os.cpu_count() or 1) if spent > 0 else 0.0
