"""Where a real cluster's ranks run (DESIGN §4.7): network namespaces with a tc-shaped server link, or localhost.

As root, :func:`open_hosts` gives one network namespace per rank joined by a
bridge, the server's link shaped to ``rate`` by ``tc``
(:mod:`dlsched.runtime.netns`); otherwise plain localhost processes,
unshaped, and :attr:`Hosts.note` says so.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from dlsched.errors import DlschedError

from . import netns
from .launcher import rank_env

NETWORKS = ("auto", "netns", "localhost")


@dataclass
class Hosts:
    """Where the ranks run: ``kind`` is ``netns`` (shaped link) or ``localhost``."""

    kind: str
    rate: str | None
    note: str
    cluster: object = None
    ranks: int = 0

    def prefixes(self) -> list[list[str]] | None:
        return [self.cluster.exec_prefix(i) for i in range(self.ranks)] if self.cluster else None

    def envs(self) -> list[dict] | None:
        return [rank_env(self.cluster.ifname(i)) for i in range(self.ranks)] if self.cluster else None

    def init_method(self) -> str | None:
        if not self.cluster:
            return None
        return f"tcp://{self.cluster.address(0)}:{random.randint(20000, 30000)}"

    def launch_args(self) -> dict:
        """What :func:`~dlsched.runtime.launcher.launch_ranks` takes to run the ranks on these hosts (none on
        localhost, whose defaults are its own)."""
        if not self.cluster:
            return {}
        return {"prefixes": self.prefixes(), "env": self.envs(), "init_method": self.init_method()}

    def close(self) -> None:
        if self.cluster:
            self.cluster.destroy()


def open_hosts(network: str, ranks: int, rate: str | None) -> Hosts:
    """Build the hosts of a ``ranks``-process cluster (``network``: auto, netns or localhost).

    Raises
    ------
    DlschedError
        ``netns`` asked for without root, or the namespaces cannot be made.
    """
    if network not in NETWORKS:
        raise DlschedError(f"--network must be one of {', '.join(NETWORKS)}, got {network!r}")
    if network == "netns" and not netns.available():
        raise DlschedError("--network netns needs root and the ip and tc tools (network namespaces with a "
                           "tc-shaped link); run as root, or use --network localhost")
    if network == "localhost" or not netns.available():
        why = "asked for" if network == "localhost" else "not root, so no network namespaces"
        return Hosts("localhost", None, f"plain localhost processes ({why}): the link is loopback, unshaped"
                     + (f"; --rate {rate} is not applied" if rate else ""), ranks=ranks)
    if rate is None:
        raise DlschedError("a shaped link needs a rate; give --rate (e.g. 1gbit) or --rate auto")
    netns.tc_rate_bytes(rate)
    cluster = netns.Cluster(ranks, rate)
    cluster.create()
    return Hosts("netns", rate, f"network namespaces, server link shaped to {rate} by tc tbf", cluster, ranks)
