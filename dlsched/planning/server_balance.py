"""How evenly a placement spreads the parameters' bytes over the servers.

Lemma 3.2 counts servers as if each carried ``S_p / N_ps`` bytes. A placement
that does not, carries the slowest server's share on every round: the iteration
waits for the most loaded server, so an uneven placement needs more servers
than the lemma says, or a better placement. Round-robin (TensorFlow's
``replica_device_setter``, and dlsched's default so that a prediction matches
what that framework does) is uneven when parameter sizes cycle: on ResNet-50,
conv/bn/bn puts every convolution on one server of three. Greedy balances.

Examples
--------
>>> from dlsched.dag import Graph, RECV
>>> g = Graph("g")
>>> for n, b in [("w1", 90), ("b1", 1), ("b2", 1), ("w2", 90)]: _ = g.add_op(n, RECV, bytes=b)
>>> g.assign_ps(2)
>>> b = server_balance(g)
>>> b.loads, b.greedy_loads, b.uneven
([91, 91], [91, 91], False)
>>> g.assign_ps(3)
>>> b = server_balance(g)
>>> b.loads, round(b.imbalance, 2), b.uneven, b.most_loaded, b.greedy_loads
([180, 1, 1], 2.97, True, 0, [90, 90, 2])
"""
from __future__ import annotations

from dataclasses import dataclass

from dlsched.dag import Graph, ps_assignment

UNEVEN = 1.2  # warn above this max/mean server load


@dataclass(frozen=True)
class ServerBalance:
    """Bytes per server under a placement, and under greedy for comparison.

    Attributes
    ----------
    strategy : str
        The placement in use.
    loads, greedy_loads : list of int
        Parameter bytes per server (index = server), in use and under greedy.
    imbalance, greedy_imbalance : float
        Most loaded server over the mean (1 is even).
    most_loaded : int
        The server that carries the most bytes.
    """

    strategy: str
    loads: list
    greedy_loads: list
    imbalance: float
    greedy_imbalance: float
    most_loaded: int

    @property
    def uneven(self) -> bool:
        """Whether the most loaded server carries more than ``UNEVEN`` × the mean."""
        return self.imbalance > UNEVEN

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "bytes_per_server": self.loads, "imbalance": self.imbalance,
                "most_loaded": self.most_loaded, "uneven": self.uneven,
                "greedy_bytes_per_server": self.greedy_loads, "greedy_imbalance": self.greedy_imbalance}


def _loads(recvs, server: dict[str, int], count: int) -> list[int]:
    out = [0] * count
    for op in recvs:
        out[server[op.name]] += op.bytes
    return out


def _imbalance(loads: list[int]) -> float:
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean > 0 else 1.0


def server_balance(graph: Graph) -> ServerBalance:
    """Bytes per server under ``graph``'s placement (``--ps``, ``--ps-strategy``), and under greedy.

    Parameters
    ----------
    graph : Graph
        A graph whose servers are assigned (:meth:`Graph.assign_ps`).

    Returns
    -------
    ServerBalance
    """
    recvs, count = graph.recvs(), max(1, graph.ps_count)
    loads = _loads(recvs, ps_assignment(recvs, count, graph.ps_strategy), count)
    greedy = _loads(recvs, ps_assignment(recvs, count, "greedy"), count)
    return ServerBalance(graph.ps_strategy, loads, greedy, _imbalance(loads), _imbalance(greedy),
                         max(range(count), key=lambda k: (loads[k], -k)))
