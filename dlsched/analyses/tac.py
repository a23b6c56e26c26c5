"""TAC: timing-aware communication scheduling (TicTac §4.3, Algorithm 3).

TAC picks transfers one at a time. At each step it updates the op properties
of Algorithm 1 for the outstanding recvs and takes the minimum under the
comparator (DESIGN §4.4)::

    a ≺ b  ⟺  min(P_b, M_a) < min(P_a, M_b),  and when equal,  M⁺_a < M⁺_b

scanning the outstanding recvs in canonical order and replacing the current
best only by a candidate that strictly precedes it.

Speed
-----
The straightforward version recomputes every op's properties at every step
(O(recvs × ops × dependencies)). Here:

- ops with the same dependency set are merged into one group (their
  properties are equal), and each group's dependency set is a row of a
  boolean groups × recvs matrix;
- removing a recv only touches the groups that contain it: their outstanding
  count and communication time drop, and a group left with one outstanding
  dependency adds its compute time to that recv's directly-dependent load;
- the impending communication load of every outstanding recv is one masked
  column-minimum over the groups still waiting for two or more transfers.

All times are exact integers (:func:`~dlsched.analyses.properties.exact_times`),
so the result is identical to the straightforward definition on every input.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dlsched.dag import Graph

from .properties import check_times, dependency_groups, exact_times

_NONE = np.iinfo(np.int64).max  # impending load when no op waits for two transfers


def tac_order(graph: Graph, times: Mapping[str, float]) -> dict[str, int]:
    """Priority numbers of the recv ops by TAC (TicTac Algorithm 3, DESIGN §4.4).

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → seconds for every op (the time oracle).

    Returns
    -------
    dict
        Recv op name → distinct priority 0..n−1 (lower goes first), in
        canonical order.

    Raises
    ------
    OracleError
        ``times`` misses an op or holds a negative/non-finite time.

    Examples
    --------
    Figure 1 of the paper: ``op1`` needs only ``recv1``, ``op2`` needs both.

    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("fig1")
    >>> for n in ("recv1", "recv2"): _ = g.add_op(n, RECV)
    >>> for n in ("op1", "op2"): _ = g.add_op(n, COMPUTE)
    >>> g.add_edge("recv1", "op1"); g.add_edge("recv1", "op2"); g.add_edge("recv2", "op2")
    >>> tac_order(g, dict.fromkeys(["recv1", "recv2", "op1", "op2"], 1.0))
    {'recv1': 0, 'recv2': 1}
    """
    check_times(graph, times)
    groups = dependency_groups(graph)
    recvs = groups.recvs
    n = len(recvs)
    if n == 0:
        return {}
    exact = exact_times(times, [op.name for op in graph.ops()])
    transfer = np.array([exact[r] for r in recvs], dtype=np.int64)
    member = groups.matrix()
    load = np.array([sum(exact[name] for name in ops) for ops in groups.members], dtype=np.int64)
    outstanding_count = member.sum(axis=1).astype(np.int64)
    # Exact integer matmul (numpy does not use BLAS for int64).
    comm = member.astype(np.int64) @ transfer if len(load) else np.zeros(0, dtype=np.int64)
    outstanding = np.ones(n, dtype=bool)
    direct = np.zeros(n, dtype=np.int64)
    groups_of = [np.flatnonzero(member[:, r]) for r in range(n)]

    single = np.flatnonzero(outstanding_count == 1)
    if len(single):
        np.add.at(direct, member[single].argmax(axis=1), load[single])

    transfer_list = transfer.tolist()
    priority: dict[str, int] = {}
    for count in range(n):
        cand = np.flatnonzero(outstanding)
        waiting = np.flatnonzero(outstanding_count > 1)
        if len(waiting):
            sub = member[np.ix_(waiting, cand)]
            impending = np.where(sub, comm[waiting, None], _NONE).min(axis=0).tolist()
        else:
            impending = [_NONE] * len(cand)
        best = _scan_minimum(cand.tolist(), direct[cand].tolist(), [transfer_list[c] for c in cand], impending)

        priority[recvs[best]] = count
        outstanding[best] = False
        rows = groups_of[best]
        if len(rows):
            outstanding_count[rows] -= 1
            comm[rows] -= transfer[best]
            # Groups now waiting for one transfer only: their load is that transfer's.
            now_single = rows[outstanding_count[rows] == 1]
            if len(now_single):
                last = (member[now_single] & outstanding).argmax(axis=1)
                np.add.at(direct, last, load[now_single])
    return {r: priority[r] for r in recvs}


def _scan_minimum(cand: list, P: list, M: list, M_plus: list) -> int:
    """The TAC comparator scan: keep the current best unless a candidate strictly precedes it.

    ``cand`` are recv positions in canonical order, with their directly
    dependent load ``P``, transfer time ``M`` and impending load ``M_plus``.
    """
    b = 0
    for a in range(1, len(cand)):
        left, right = min(P[b], M[a]), min(P[a], M[b])
        if left < right or (left == right and M_plus[a] < M_plus[b]):
            b = a
    return cand[b]
