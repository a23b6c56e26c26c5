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
