"""TIC: timing-independent communication scheduling (TicTac §4.2, Algorithm 2).

TIC orders transfers from the DAG alone. With the general time oracle (every
recv costs 1, every other op 0), the impending communication load of a recv is
the smallest number of outstanding transfers that an op waiting for it and for
another transfer still needs. Recvs are ranked by it, ascending (DESIGN §4.3).
"""
from __future__ import annotations

import numpy as np

from dlsched.dag import Graph

from .properties import dependency_groups


def tic_order(graph: Graph) -> dict[str, int]:
    """Priority numbers of the recv ops by TIC (TicTac Algorithm 2, DESIGN §4.3).

    Every recv is outstanding; under the general oracle an op's communication
    time is the size of its dependency set, and a recv's impending
    communication load is the smallest such size among ops with two or more
    dependencies including it (``+inf`` if none). Recvs are ranked by it
    ascending; equal loads share a priority, and a priority number is the
    count of recvs ranked strictly before it (0, 0, 2, 3, …).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    dict
        Recv op name → priority number (lower goes first), in canonical order.

    Examples
    --------
    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("fig4b")
    >>> for n in "ABCD": _ = g.add_op(n, RECV)
    >>> for n in ("ab", "abc", "abcd"): _ = g.add_op(n, COMPUTE)
    >>> for u, v in [("A", "ab"), ("B", "ab"), ("ab", "abc"), ("C", "abc"), ("abc", "abcd"), ("D", "abcd")]:
    ...     g.add_edge(u, v)
    >>> tic_order(g)
    {'A': 0, 'B': 0, 'C': 2, 'D': 3}
    """
    groups = dependency_groups(graph)
    n = len(groups.recvs)
    if n == 0:
        return {}
    member = groups.matrix()
    size = member.sum(axis=1)
    inf = np.iinfo(np.int64).max
    waiting = size > 1
    if waiting.any():
        impending = np.where(member[waiting], size[waiting, None], inf).min(axis=0)
    else:
        impending = np.full(n, inf, dtype=np.int64)
    ranked = np.sort(impending)
    priority = np.searchsorted(ranked, impending, side="left")
    return {name: int(p) for name, p in zip(groups.recvs, priority)}
