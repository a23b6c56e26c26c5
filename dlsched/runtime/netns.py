"""Network-namespace hosts joined by a bridge, with the server's link rate-limited
by ``tc`` (DESIGN §6, §4.7). Only addresses this module creates (10.77.0.0/24) are used.

``Cluster.create()`` builds ``dls_hub`` (the bridge) and one namespace per host;
``Cluster.destroy()`` removes them, and is registered with atexit and signal
handlers so a failed or interrupted run leaves nothing behind. Host 0 is the
parameter server: its link is limited to the ``tc`` rate (``1gbit``,
``500mbit``) in both directions, so every transfer crosses a real, shaped link.
Needs root (:func:`available` says whether this process can make namespaces).

Examples
--------
>>> tc_rate_bytes("1gbit"), tc_rate_bytes("500mbit")
(125000000.0, 62500000.0)
>>> c = Cluster(3, "1gbit")
>>> c.address(0), c.exec_prefix(1)
('10.77.0.1', ['ip', 'netns', 'exec', 'dls_h1'])
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys

from dlsched.errors import DlschedError

SUBNET = "10.77.0"
HUB = "dls_hub"


_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)bit$")


def tc_rate_bytes(rate: str) -> float:
    """Bytes per second of a ``tc`` rate such as ``1gbit``, ``500mbit`` or ``800kbit``.

    Raises
    ------
    DlschedError
        Not a positive ``NUMBER[k|m|g]bit`` rate.
    """
    m = _RATE.match(str(rate).strip().lower())
    value = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8 if m else 0.0
    if value <= 0:
        raise DlschedError(f"--rate must be a positive tc rate such as 1gbit, 500mbit or 800kbit, got {rate!r}")
    return value


def available() -> bool:
    """Whether this process can build the cluster (root, with ``ip`` and ``tc`` installed)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(args), capture_output=True, text=True, check=check)
    except subprocess.CalledProcessError as e:
        raise DlschedError(f"building the network-namespace cluster failed at '{' '.join(args)}': "
                           f"{(e.stderr or '').strip() or e}") from None


class Cluster:
    def __init__(self, hosts: int, rate: str = "1gbit"):
        self.names = [f"dls_h{i}" for i in range(hosts)]
        self.rate = rate
        self.created: list[str] = []

    def address(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def ifname(self, i: int) -> str:
        return f"dlsv{i}"

    def create(self) -> None:
        atexit.register(self.destroy)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.destroy()  # leftovers of an earlier interrupted run
        for ns in [HUB, *self.names]:
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", HUB, "link", "add", "dlsbr", "type", "bridge")
        sh("ip", "-n", HUB, "link", "set", "dlsbr", "up")
        for i, ns in enumerate(self.names):
            inner, outer = self.ifname(i), f"dlsb{i}"
            sh("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "link", "set", outer, "netns", HUB)
            sh("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inner)
            sh("ip", "-n", ns, "link", "set", inner, "up")
            sh("ip", "-n", HUB, "link", "set", outer, "master", "dlsbr")
            sh("ip", "-n", HUB, "link", "set", outer, "up")
        # host 0 is the parameter server: limit its link in both directions
        for ns, dev in ((self.names[0], self.ifname(0)), (HUB, "dlsb0")):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
               "burst", "128kb", "latency", "100ms")

    def exec_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.names[i]]

    def destroy(self) -> None:
        for ns in [*self.names, HUB]:
            sh("ip", "netns", "del", ns, check=False)
        self.created.clear()

    def _on_signal(self, signum, frame):
        self.destroy()
        sys.exit(128 + signum)
