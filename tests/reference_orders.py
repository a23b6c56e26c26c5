"""Straightforward TIC and TAC, written as the definitions read (DESIGN §4.3, §4.4).

They are the oracle of the equivalence tests and the baseline of
``benchmarks/bench_tac.py``: every step recomputes the properties of every op
with the set-based :func:`~dlsched.analyses.properties.op_properties`
(TicTac Algorithm 1). Times go through the same exact integer conversion as
the fast versions, so results can be compared for equality.
"""
from __future__ import annotations

from dlsched.analyses.properties import check_times, dependency_sets, exact_times, op_properties
from dlsched.dag import RECV


def reference_tic(graph) -> dict[str, int]:
    """TIC by the definition: general oracle, all recvs outstanding, rank by M⁺."""
    general = {op.name: (1 if op.kind == RECV else 0) for op in graph.ops()}
    recvs = [op.name for op in graph.recvs()]
    props = op_properties(graph, general, recvs)
    M_plus = props.impending_comm
    return {r: sum(1 for s in recvs if M_plus[s] < M_plus[r]) for r in recvs}


def precedes(a: str, b: str, props) -> bool:
    """The TAC comparator ``a ≺ b`` (DESIGN §4.4)."""
    P, M, M_plus = props.direct_load, props.comm_time, props.impending_comm
    left, right = min(P[b], M[a]), min(P[a], M[b])
    if left != right:
        return left < right
    return M_plus[a] < M_plus[b]


def reference_tac(graph, times) -> dict[str, int]:
    """TAC by the definition: recompute properties, scan R in canonical order, pick, repeat."""
    check_times(graph, times)
    exact = exact_times(times, [op.name for op in graph.ops()])
    deps = dependency_sets(graph)
    R = [op.name for op in graph.ops() if op.kind == RECV]  # canonical order
    priority = {}
    count = 0
    while R:
        props = op_properties(graph, exact, R, deps)
        best = R[0]
        for a in R[1:]:
            if precedes(a, best, props):
                best = a
        priority[best] = count
        count += 1
        R.remove(best)
    return {op.name: priority[op.name] for op in graph.recvs()}


__all__ = ["reference_tic", "reference_tac", "precedes"]
