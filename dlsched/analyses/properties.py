"""Communication dependencies and the op properties of TicTac Algorithm 1.

For an op, its *communication dependencies* are the recv ops it depends on,
directly or transitively (TicTac §4.1, ``op.dep``). Given the set of
outstanding recvs, Algorithm 1 derives three properties (DESIGN §4.2):

- communication time of an op: the summed time of its outstanding
  dependencies (for a recv: its own transfer time);
- directly-dependent compute load of an outstanding recv: the time of the
  non-recv ops that completing that recv alone unlocks;
- impending communication load of an outstanding recv: the smallest
  communication time among ops that still wait for it *and* for another
  outstanding recv (``+inf`` if there is none).

This module holds the readable, set-based version (what the reference
implementations in the test suite use) and the compact structures the fast
TIC/TAC use: dependency bitsets and groups of ops sharing a dependency set.

Exact arithmetic
----------------
TAC compares sums of times for equality (its tie rule), so floating-point
rounding would make the result depend on summation order. :func:`exact_times`
turns seconds into integers of a common binary quantum small enough that the
sum of *all* times stays below 2**60 (so below int64 overflow): for any real
iteration the quantum is far below an attosecond. Every sum and comparison is
then exact integer arithmetic, order-independent, and the same in every
implementation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import networkx as nx

from dlsched.dag import RECV, Graph
from dlsched.errors import OracleError
from dlsched.op_times import MAX_OP_SECONDS, is_valid_time

#: Bits of headroom for exact integer times: the sum of all times is < 2**60.
_EXACT_BITS = 60


def check_times(graph: Graph, times: Mapping[str, float], names: Iterable[str] | None = None,
                where: str = "time oracle") -> None:
    """Raise :class:`OracleError` when ``times`` misses an op or holds a bad value.

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → seconds.
    names : iterable of str, optional
        The ops that need a time (default: every op of ``graph``).
    """
    names = [op.name for op in graph.ops()] if names is None else list(names)
    missing = [n for n in names if n not in times]
    if missing:
        raise OracleError(f"{where} misses {len(missing)} of the model's ops: {', '.join(missing[:10])}"
                          f"{' …' if len(missing) > 10 else ''}")
    bad = [n for n in names if not is_valid_time(times[n])]
    if bad:
        raise OracleError(f"{where} has negative, NaN, infinite or absurd (> {MAX_OP_SECONDS:.0f} s) times for: "
                          f"{', '.join(bad[:10])}")


def exact_times(times: Mapping[str, float], names: Iterable[str]) -> dict[str, int]:
    """Convert op times to exact integers of one binary quantum.

    The quantum is ``2**(e - 60)`` where ``2**e`` is the first power of two
    above the total time of ``names``, so every sum of these integers fits in
    an int64 and is exact. Each time is rounded to the nearest quantum
    (ties to even), which is the only rounding anywhere.

    Parameters
    ----------
    times : mapping
        Op name → seconds (finite, ≥ 0).
    names : iterable of str
        The ops to convert (the scale depends on their total).

    Returns
    -------
    dict
        Op name → integer time.

    Examples
    --------
    >>> q = exact_times({"a": 0.5, "b": 0.25, "c": 0.25}, ["a", "b", "c"])
    >>> q["a"] == q["b"] + q["c"], q["a"] + q["b"] + q["c"] < 2**60
    (True, True)
    """
    names = list(names)
    total = math.fsum(float(times[n]) for n in names)
    if total <= 0:
        return {n: 0 for n in names}
    _, e = math.frexp(total)  # total < 2**e
    shift = _EXACT_BITS - e
    return {n: round(math.ldexp(float(times[n]), shift)) for n in names}


def dependency_sets(graph: Graph) -> dict[str, frozenset[str]]:
    """Communication dependencies of every op (TicTac §4.1, ``op.dep``).

    A recv op is a root and depends on no recv; any other op depends on the
    recvs among its ancestors. Computed by a post-order traversal, as in the
    paper.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    dict
        Op name → frozenset of recv op names.

    Examples
    --------
    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("fig1")
    >>> for n in ("recv1", "recv2"): _ = g.add_op(n, RECV)
    >>> for n in ("op1", "op2"): _ = g.add_op(n, COMPUTE)
    >>> g.add_edge("recv1", "op1"); g.add_edge("recv1", "op2"); g.add_edge("recv2", "op2")
    >>> sorted(dependency_sets(g)["op2"])
    ['recv1', 'recv2']
    """
    deps: dict[str, frozenset[str]] = {}
    for name in nx.topological_sort(graph.nx):
        acc: set[str] = set()
        for pred in graph.predecessors(name):
            acc |= deps[pred]
            if graph.op(pred).kind == RECV:
                acc.add(pred)
        deps[name] = frozenset(acc)
    return deps


@dataclass
class OpProperties:
    """The properties of TicTac Algorithm 1 for one outstanding set.

    Attributes
    ----------
    comm_time : dict
        Every op → communication time (``M``).
    direct_load : dict
        Outstanding recv → directly-dependent compute load (``P``).
    impending_comm : dict
        Outstanding recv → impending communication load (``M⁺``; ``math.inf``
        when no op waits for it and another outstanding recv).
    """

    comm_time: dict
    direct_load: dict
    impending_comm: dict


def op_properties(graph: Graph, times: Mapping[str, float], outstanding: Iterable[str],
                  deps: Mapping[str, frozenset[str]] | None = None) -> OpProperties:
    """Update the op properties for an outstanding recv set (TicTac Algorithm 1).

    The straightforward version: one pass over every op per call. Give it
    integer times (see :func:`exact_times`) when results are compared for
    equality.

    Parameters
    ----------
    graph : Graph
    times : mapping
        Op name → time.
    outstanding : iterable of str
        The recvs whose transfers have not completed (``R``).
    deps : mapping, optional
        Precomputed :func:`dependency_sets`.

    Returns
    -------
    OpProperties

    Examples
    --------
    Figure 1 of the paper, unit times:

    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("fig1")
    >>> for n in ("recv1", "recv2"): _ = g.add_op(n, RECV)
    >>> for n in ("op1", "op2"): _ = g.add_op(n, COMPUTE)
    >>> g.add_edge("recv1", "op1"); g.add_edge("recv1", "op2"); g.add_edge("recv2", "op2")
    >>> p = op_properties(g, dict.fromkeys(["recv1", "recv2", "op1", "op2"], 1), ["recv1", "recv2"])
    >>> p.direct_load, p.impending_comm
    ({'recv1': 1, 'recv2': 0}, {'recv1': 2, 'recv2': 2})
    """
    if deps is None:
        deps = dependency_sets(graph)
    R = set(outstanding)
    M: dict[str, float] = {}
    for op in graph.ops():
        if op.kind == RECV:
            M[op.name] = times[op.name]
        else:
            M[op.name] = sum(times[r] for r in deps[op.name] & R)
    in_order = [op.name for op in graph.recvs() if op.name in R]  # canonical order, deterministic output
    P = {r: 0 for r in in_order}
    M_plus = {r: math.inf for r in in_order}
    for op in graph.ops():
        if op.kind == RECV:
            continue
        D = deps[op.name] & R
        if len(D) == 1:
            (r,) = D
            P[r] += times[op.name]
        elif len(D) > 1:
            for r in D:
                M_plus[r] = min(M_plus[r], M[op.name])
    return OpProperties(M, P, M_plus)


# -- compact structures for the fast implementations ---------------------------

@dataclass
class DependencyGroups:
    """Non-recv ops grouped by their (non-empty) communication dependencies.

    Ops with the same dependency set share every property of Algorithm 1, so
    the fast TIC/TAC work on groups instead of ops.

    Attributes
    ----------
    recvs : list of str
        Recv op names in canonical order; bit ``i`` of a mask is ``recvs[i]``.
    masks : list of int
        Each group's dependency set as a bitset (distinct, non-zero).
    members : list of list of str
        Each group's op names, in canonical order.
    """

    recvs: list
    masks: list
    members: list

    def matrix(self):
        """The groups × recvs membership matrix (numpy bool)."""
        import numpy as np

        n = len(self.recvs)
        nbytes = max(1, (n + 7) // 8)
        if not self.masks:
            return np.zeros((0, n), dtype=bool)
        raw = np.frombuffer(b"".join(m.to_bytes(nbytes, "little") for m in self.masks), dtype=np.uint8)
        bits = np.unpackbits(raw.reshape(len(self.masks), nbytes), axis=1, bitorder="little")
        return bits[:, :n].astype(bool)


def dependency_groups(graph: Graph) -> DependencyGroups:
    """Group the non-recv ops of ``graph`` by communication dependencies.

    Dependencies are propagated as Python-int bitsets over recvs in
    topological order (one OR per edge).

    Returns
    -------
    DependencyGroups

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, _ = random_dag(30, 6, seed=2)
    >>> groups = dependency_groups(g)
    >>> len(groups.recvs)
    6
    """
    recvs = graph.recvs()
    bit = {op.name: 1 << i for i, op in enumerate(recvs)}
    masks: dict[str, int] = {}
    for name in nx.topological_sort(graph.nx):
        acc = 0
        for pred in graph.predecessors(name):
            acc |= masks[pred]
        masks[name] = acc
        if name in bit:
            masks[name] = bit[name]  # what successors inherit; a recv itself depends on no recv
    index: dict[int, int] = {}
    group_masks: list[int] = []
    members: list[list[str]] = []
    for op in graph.ops():
        if op.kind == RECV:
            continue
        m = masks[op.name]
        if not m:
            continue
        g = index.get(m)
        if g is None:
            g = index[m] = len(group_masks)
            group_masks.append(m)
            members.append([])
        members[g].append(op.name)
    return DependencyGroups([op.name for op in recvs], group_masks, members)
