"""The wire protocol of a parameter-server job: ranks, message tags and send order.

Ranks ``0 .. S-1`` are servers and ranks ``S .. S+W-1`` workers. Parameter
``name`` lives on server :meth:`PSConfig.server_of(name) <dlsched.runtime.ps_config.PSConfig.server_of>`.

Tag space. gloo matches a send with a receive by (peer, tag), so every message
kind between a server and a worker has its own tags. With ``N`` parameters in
the priority order and ``i`` the index of a parameter in that order:

==================  ============  =========================  =====================
message             tag           direction                  when
==================  ============  =========================  =====================
parameter ``i``     ``i``         server → worker            every iteration
gradient of ``i``   ``N + i``     worker → its server        training
done                ``2 N``       worker → every server      inference
batch slice         ``2 N + 1``   server 0 → worker          with a batch policy
report              ``2 N + 2``   worker → server 0          with a batch policy
==================  ============  =========================  =====================

With a batch policy (:mod:`~dlsched.runtime.batch_manager`) server 0 sends each
worker the slice of the iteration's global batch it trains on (offset and
size), and the worker reports its busy time and resource readings back.

A pair of ranks exchanges at most one message per tag and iteration, and each
side completes an iteration's transfers before posting the next one's, so
tags need no iteration number.

Examples
--------
>>> tags = Tags(["conv1.weight", "conv1.bias", "fc.weight"])
>>> tags.param("conv1.bias"), tags.grad("conv1.bias"), tags.done, tags.slice, tags.report
(1, 4, 6, 7, 8)
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ps_config import PSConfig


class Tags:
    """The message tags of a job whose priority order is ``order`` (see the module's table).

    Parameters
    ----------
    order : list of str
        Parameter names, highest priority first (``PSConfig.order``).
    """

    def __init__(self, order: list[str]):
        self._index = {n: i for i, n in enumerate(order)}
        self._count = len(order)

    def param(self, name: str) -> int:
        """Tag of the parameter ``name`` sent by its server to a worker."""
        return self._index[name]

    def grad(self, name: str) -> int:
        """Tag of the gradient of ``name`` sent by a worker to the parameter's server."""
        return self._count + self._index[name]

    @property
    def done(self) -> int:
        """Tag of the one-element message that ends a worker's inference iteration."""
        return 2 * self._count

    @property
    def slice(self) -> int:
        """Tag of the (offset, size) of a worker's share of the global batch, sent by server 0."""
        return 2 * self._count + 1

    @property
    def report(self) -> int:
        """Tag of a worker's report of its busy time and readings to server 0."""
        return 2 * self._count + 2


def worker_rank(cfg: PSConfig, worker: int) -> int:
    """The process-group rank of worker index ``worker`` (servers come first)."""
    return cfg.servers + worker


def send_order(cfg: PSConfig, server: int, worker: int, iteration: int) -> list[str]:
    """The order in which ``server`` sends its parameters to ``worker``.

    The priority order (with ``cfg.rotation``: that iteration's entry), or with
    ``cfg.unordered`` (a ``None`` entry) a random permutation seeded by
    (seed, server, worker, iteration), so both sides compute the same one.
    """
    order = cfg.rotation[iteration % len(cfg.rotation)] if cfg.rotation else cfg.order
    own = [n for n in (order or cfg.order) if cfg.server_of(n) == server]
    if cfg.unordered or order is None:
        random.Random(f"{cfg.seed}/{server}/{worker}/{iteration}").shuffle(own)
    return own
