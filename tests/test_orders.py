"""TIC, TAC and the other orders (TicTac §4, DESIGN §4.2–4.5).

The fast TIC/TAC are checked for exact equality against the straightforward
definitions in ``tests/reference_orders.py`` on random DAGs.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.bounds import bounds
from dlsched.analyses.orders import compute_order, first_use_order, random_order
from dlsched.analyses.properties import dependency_groups, dependency_sets, exact_times, op_properties
from dlsched.analyses.simulate import simulate
from dlsched.analyses.tac import tac_order
from dlsched.analyses.tic import tic_order
from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.errors import DlschedError, OracleError
from dlsched.synthetic import random_dag
from tests.reference_orders import reference_tac, reference_tic
from tests.paper_graphs import figure1


def build(recvs, computes, edges, name="g"):
    g = Graph(name)
    for r in recvs:
        g.add_op(r, RECV)
    for c in computes:
        g.add_op(c, COMPUTE)
    for u, v in edges:
        g.add_edge(u, v)
    g.validate()
    return g


def simulate_makespan(g, t, prio):
    return simulate(g, t, prio).makespan


# -- paper examples ----------------------------------------------------------------

def test_figure1_properties():
    g, t = figure1()
    p = op_properties(g, t, ["recv1", "recv2"])
    assert p.comm_time["op1"] == 1 and p.comm_time["op2"] == 2 and p.comm_time["recv2"] == 1
    assert p.direct_load == {"recv1": 1.0, "recv2": 0}
    assert p.impending_comm == {"recv1": 2, "recv2": 2}
    assert dependency_sets(g)["op2"] == {"recv1", "recv2"} and dependency_sets(g)["recv1"] == frozenset()


def test_figure1_tac_and_makespans():
    g, t = figure1()
    assert tac_order(g, t) == {"recv1": 0, "recv2": 1}
    assert simulate_makespan(g, t, {"recv1": 0, "recv2": 1}) == 3.0  # Figure 1(b)
    assert simulate_makespan(g, t, {"recv2": 0, "recv1": 1}) == 4.0  # Figure 1(c)
    assert simulate_makespan(g, t, tac_order(g, t)) == 3.0


def test_figure4_case1_directly_dependent_load_decides():
    # Figure 4(a): two independent transfers of equal time; A unlocks more compute.
    # A ≺ B ⟺ min(P_B, M_A) < min(P_A, M_B): min(1, 2) < min(3, 2). B is canonically first.
    g = build(["B", "A"], ["opA", "opB"], [("A", "opA"), ("B", "opB")], "fig4a")
    t = {"A": 2.0, "B": 2.0, "opA": 3.0, "opB": 1.0}
    assert tac_order(g, t) == {"B": 1, "A": 0}
    assert simulate_makespan(g, t, {"A": 0, "B": 1}) == 6.0  # M_A + max(P_A, M_B) + P_B
    assert simulate_makespan(g, t, {"B": 0, "A": 1}) == 7.0
    # swapping the loads swaps the choice
    assert tac_order(g, {**t, "opA": 1.0, "opB": 3.0}) == {"B": 0, "A": 1}


def test_figure4_case2_impending_load_decides():
    # Figure 4(b): a chain needing A and B, then C, then D; every P is 0 at first, so
    # M⁺_A = M⁺_B = Time(A) + Time(B) < M⁺_C < M⁺_D breaks the tie. Canonical order is D, C, B, A.
    g = build(["D", "C", "B", "A"], ["ab", "abc", "abcd"],
              [("A", "ab"), ("B", "ab"), ("ab", "abc"), ("C", "abc"), ("abc", "abcd"), ("D", "abcd")], "fig4b")
    t = dict.fromkeys(["A", "B", "C", "D", "ab", "abc", "abcd"], 1.0)
    p = op_properties(g, t, ["D", "C", "B", "A"])
    assert p.impending_comm == {"D": 4.0, "C": 3.0, "B": 2.0, "A": 2.0}
    assert set(p.direct_load.values()) == {0}
    order = tac_order(g, t)
    assert order == {"B": 0, "A": 1, "C": 2, "D": 3}
    assert tic_order(g) == {"D": 3, "C": 2, "B": 0, "A": 0}
    assert simulate_makespan(g, t, order) == 5.0
    assert simulate_makespan(g, t, {"D": 0, "C": 1, "B": 2, "A": 3}) == 7.0


# -- fast == straightforward ----------------------------------------------------

@st.composite
def synthetic_graphs(draw):
    g, t = random_dag(draw(st.integers(1, 40)), draw(st.integers(0, 12)), training=draw(st.booleans()),
                      ps=draw(st.integers(1, 3)), seed=draw(st.integers(0, 10**6)),
                      skip_prob=draw(st.sampled_from([0.0, 0.2, 0.6])), share_prob=draw(st.sampled_from([0.0, 0.1, 0.5])),
                      integer_times=draw(st.booleans()))
    return g, t


@st.composite
def tiny_graphs(draw):
    """Hand-built DAGs: recv roots, random forward edges, times with many ties and zeros."""
    n_recv = draw(st.integers(0, 6))
    n_comp = draw(st.integers(0, 8))
    recvs = [f"r{i}" for i in range(n_recv)]
    comps = [f"c{i}" for i in range(n_comp)]
    edges = []
    for j, c in enumerate(comps):
        preds = recvs + comps[:j]
        if preds:
            edges += [(u, c) for u in draw(st.lists(st.sampled_from(preds), max_size=4, unique=True))]
    g = build(recvs, comps, edges, "tiny")
    for i in range(n_recv):
        g.op(f"r{i}").resource = f"ps:{draw(st.integers(0, 1))}/down"
    value = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 0.5]), st.floats(0, 1e-2, allow_nan=False))
    return g, {op.name: draw(value) for op in g.ops()}


@settings(max_examples=300, deadline=None)
@given(st.one_of(synthetic_graphs(), tiny_graphs()))
def test_fast_equals_reference(case):
    g, t = case
    recvs = [op.name for op in g.recvs()]
    tac = tac_order(g, t)
    assert tac == reference_tac(g, t)
    assert list(tac) == recvs and sorted(tac.values()) == list(range(len(recvs)))
    tic = tic_order(g)
    assert tic == reference_tic(g)
    assert list(tic) == recvs
    # tie rule: a priority is the number of transfers ranked strictly before it
    values = sorted(tic.values())
    assert all(v == values.index(v) for v in values)
    b = bounds(g, t)
    assert b.lower <= b.upper and b.speedup >= 0


@settings(max_examples=50, deadline=None)
@given(synthetic_graphs())
def test_other_orders_are_permutations(case):
    g, t = case
    recvs = [op.name for op in g.recvs()]
    for algo in ("random", "topo", "layer", "tic", "tac"):
        order = compute_order(g, algo, times=t, seed=7)
        assert set(order) == set(recvs)
        if algo != "tic":
            assert sorted(order.values()) == list(range(len(recvs)))


# -- building blocks -----------------------------------------------------------

def test_exact_times_are_exact_and_scaled():
    names = ["a", "b", "c"]
    q = exact_times({"a": 0.1, "b": 0.2, "c": 0.3}, names)
    assert all(isinstance(v, int) for v in q.values())
    assert sum(q.values()) < 2**62
    assert exact_times({"a": 0.0, "b": 0.0}, ["a", "b"]) == {"a": 0, "b": 0}
    # ratios survive the conversion
    q = exact_times({"a": 1.0, "b": 3.0}, ["a", "b"])
    assert q["b"] == 3 * q["a"]


def test_dependency_groups_match_sets():
    g, _ = random_dag(60, 9, training=True, seed=5)
    groups = dependency_groups(g)
    sets = dependency_sets(g)
    bit = {r: i for i, r in enumerate(groups.recvs)}
    matrix = groups.matrix()
    seen = set()
    for row, mask, members in zip(matrix, groups.masks, groups.members):
        names = {r for r in groups.recvs if mask >> bit[r] & 1}
        assert {groups.recvs[i] for i in row.nonzero()[0]} == names
        for m in members:
            assert sets[m] == names and g.op(m).kind != RECV
            seen.add(m)
    assert seen == {op.name for op in g.ops() if op.kind != RECV and sets[op.name]}


def test_tac_needs_complete_times():
    g, t = figure1()
    with pytest.raises(OracleError, match="op2"):
        tac_order(g, {k: v for k, v in t.items() if k != "op2"})
    with pytest.raises(OracleError):
        tac_order(g, {**t, "op1": math.nan})


def test_no_transfers():
    g = build([], ["a", "b"], [("a", "b")])
    t = {"a": 1.0, "b": 1.0}
    for algo in ("tic", "tac", "random", "topo"):
        assert compute_order(g, algo, times=t) == {}


def test_first_use_order():
    # w1 is declared first but used last; unused goes last; same first user keeps canonical order
    g = build(["w1", "w2", "w3", "unused"], ["x", "y"],
              [("w2", "x"), ("w3", "x"), ("x", "y"), ("w1", "y")])
    assert first_use_order(g) == {"w1": 2, "w2": 0, "w3": 1, "unused": 3}
    assert compute_order(g, "layer") == compute_order(g, "topo")


def test_random_order_is_seeded():
    g, _ = random_dag(50, 20, seed=1)
    a, b, c = random_order(g, 1), random_order(g, 1), random_order(g, 2)
    assert a == b and a != c
    assert sorted(a.values()) == list(range(20))


def test_compute_order_errors():
    g, t = figure1()
    with pytest.raises(DlschedError, match="oracle"):
        compute_order(g, "tac")
    with pytest.raises(DlschedError, match="oracle"):
        compute_order(g, "exact")
    with pytest.raises(DlschedError, match="unknown"):
        compute_order(g, "fastest")


def test_exact_delegation():
    g, t = random_dag(10, 4, seed=3, integer_times=True)
    order = compute_order(g, "exact", times=t)
    assert sorted(order.values()) == [0, 1, 2, 3]
    best = simulate(g, t, order).makespan
    for algo in ("tac", "tic", "topo", "random"):
        assert best <= simulate(g, t, compute_order(g, algo, times=t)).makespan + 1e-12
    big, bt = random_dag(200, 60, seed=1)
    with pytest.raises(DlschedError, match="time limit"):
        compute_order(big, "exact", times=bt)
