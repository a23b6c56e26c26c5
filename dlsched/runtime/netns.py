"""Network-namespace hosts joined by a bridge, with the server's link rate-limited
by ``tc`` (DESIGN §6, §4.7). Only addresses this module creates (10.77.0.0/24) are used.

``Cluster.create()`` builds ``dls<pid>_hub`` (the bridge) and one namespace per
host, ``dls<pid>_h<i>``, named after the process that owns them, so two runs on
one host never touch each other's (each has its own bridge, so both can use the
same addresses). ``Cluster.destroy()`` removes them, and is registered with
atexit and signal handlers so a failed or interrupted run leaves nothing
behind; what a SIGKILLed run left is removed by the next one, and only when
its owner is dead (:func:`sweep`). Host 0 is the
parameter server: its link is limited to the ``tc`` rate (``1gbit``,
``500mbit``) in both directions, so every transfer crosses a real, shaped link;
``rate=None`` leaves every link unshaped (hosts that only need separate network
stacks, e.g. two machines each running ``torchrun``). Needs root (:func:`available` says whether this process can make namespaces).

Examples
--------
>>> tc_rate_bytes("1gbit"), tc_rate_bytes("500mbit")
(125000000.0, 62500000.0)
>>> c = Cluster(3, "1gbit")
>>> c.address(0), c.exec_prefix(1) == ["ip", "netns", "exec", f"dls{os.getpid()}_h1"]
('10.77.0.1', True)
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

from .lifetime import left_by_the_dead

SUBNET = "10.77.0"
# A namespace of ours: dls<owner pid>_hub or dls<owner pid>_h<i>.
OURS = re.compile(r"dls(?P<pid>\d+)_(hub|h\d+)")


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


def sweep() -> list[str]:
    """Delete the namespaces whose owner is dead (a SIGKILLed run); return their names."""
    listed = sh("ip", "netns", "list", check=False).stdout.split()
    gone = [ns for ns in listed if left_by_the_dead(ns, OURS)]
    for ns in gone:
        sh("ip", "netns", "del", ns, check=False)
    return gone


class Cluster:
    def __init__(self, hosts: int, rate: str | None = "1gbit"):
        tag = f"dls{os.getpid()}"
        self.hub = f"{tag}_hub"
        self.names = [f"{tag}_h{i}" for i in range(hosts)]
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
        sweep()  # what runs killed by SIGKILL left
        hub = self.hub
        for ns in [hub, *self.names]:
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", hub, "link", "add", "dlsbr", "type", "bridge")
        sh("ip", "-n", hub, "link", "set", "dlsbr", "up")
        for i, ns in enumerate(self.names):
            inner, outer = self.ifname(i), f"dlsb{i}"
            # made inside our namespaces: no name in the host's own namespace, which other runs share
            sh("ip", "-n", hub, "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inner)
            sh("ip", "-n", ns, "link", "set", inner, "up")
            sh("ip", "-n", hub, "link", "set", outer, "master", "dlsbr")
            sh("ip", "-n", hub, "link", "set", outer, "up")
        # host 0 is the parameter server: limit its link in both directions
        for ns, dev in ((self.names[0], self.ifname(0)), (hub, "dlsb0")) if self.rate else ():
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
               "burst", "128kb", "latency", "100ms")

    def exec_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.names[i]]

    def destroy(self) -> None:
        for ns in self.created:
            sh("ip", "netns", "del", ns, check=False)
        self.created.clear()

    def _on_signal(self, signum, frame):
        self.destroy()
        sys.exit(128 + signum)
