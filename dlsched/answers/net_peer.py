"""The ``net-peer`` answer: serve network measurements, the far end of ``profile --measure-network --peer``.

:func:`net_peer` hosts a TCPStore where it listens, and serves each client
that joins as rank 1 over gloo (protocol: :mod:`dlsched.profiling.network`).

Examples
--------
>>> Listen().port
29555
>>> net_peer(Listen(port=0, sessions=1))  # doctest: +SKIP
dlsched net-peer listening on 127.0.0.1:...
1
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dlsched.profiling.network import serve_peer


@dataclass(frozen=True)
class Listen:
    """Where to listen (port 0 picks a free one), how many measurements to serve (0: until interrupted), and
    the seconds any wait inside a measurement may take."""

    host: str = "127.0.0.1"
    port: int = 29555
    sessions: int = 0
    timeout: float = 60.0


def net_peer(listen: Listen = Listen(), announce: Callable[[str], None] = print) -> int:
    """Serve measurements as ``listen`` says; ``announce`` hears ``dlsched net-peer listening on HOST:PORT``
    once it listens. Returns the number of sessions served.

    Raises
    ------
    NetworkError
        The address cannot be listened on.
    """
    return serve_peer(host=listen.host, port=listen.port, sessions=listen.sessions, timeout=listen.timeout,
                      announce=announce)
