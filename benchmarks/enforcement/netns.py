"""Network-namespace hosts joined by a bridge, with the server's link rate-limited
by ``tc`` (DESIGN §9). Only addresses this module creates (10.77.0.0/24) are used.

``Cluster.create()`` builds ``dls_hub`` (the bridge) and one namespace per host;
``Cluster.destroy()`` removes them, and is registered with atexit and signal
handlers so a failed or interrupted run leaves nothing behind.
"""
from __future__ import annotations

import atexit
import signal
import subprocess
import sys

SUBNET = "10.77.0"
HUB = "dls_hub"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


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
