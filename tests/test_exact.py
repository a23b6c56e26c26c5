"""The exact transfer order: equals brute force, beats every heuristic, honours its limits."""
from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses.exact import exact_order
from dlsched.analyses.simulate import simulate
from dlsched.errors import DlschedError
from dlsched.synthetic import random_dag


def heuristic_orders(graph, times):
    """TIC, TAC (the other engineer's modules), topo (canonical) and a few random orders."""
    try:
        from dlsched.analyses.orders import compute_order
        orders = {a: compute_order(graph, a, times=times) for a in ("tic", "tac", "topo")}
    except ImportError:
        from dlsched.analyses.tac import tac_order
        from dlsched.analyses.tic import tic_order
        orders = {"tic": tic_order(graph), "tac": tac_order(graph, times),
                  "topo": {r.name: i for i, r in enumerate(graph.recvs())}}
    spans = {a: simulate(graph, times, p).makespan for a, p in orders.items()}
    for s in range(3):
        spans[f"random{s}"] = simulate(graph, times, None, seed=s).makespan
    return spans


def brute_force(graph, times):
    names = [r.name for r in graph.recvs()]
    return min(simulate(graph, times, {n: i for i, n in enumerate(p)}).makespan
               for p in itertools.permutations(names))


def random_dags(compute: tuple[int, int], params: tuple[int, int]):
    """Random DAGs (graph, times) with op and parameter counts in the given ranges."""
    return st.builds(
        lambda n, p, training, ps, seed, integer: random_dag(n, p, training=training, ps=ps, seed=seed,
                                                             integer_times=integer),
        st.integers(*compute), st.integers(*params), st.booleans(), st.integers(1, 2), st.integers(0, 10**6),
        st.booleans())


small = random_dags((1, 12), (0, 5))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small)
def test_exact_equals_brute_force_on_tiny_graphs(gt):
    graph, times = gt
    r = exact_order(graph, times)
    assert r.proven
    assert sorted(r.priorities.values()) == list(range(len(graph.recvs())))
    assert math.isclose(r.makespan, brute_force(graph, times), rel_tol=1e-12, abs_tol=1e-15)
    # the reported order really achieves the reported makespan
    assert math.isclose(simulate(graph, times, r.priorities).makespan, r.makespan, rel_tol=1e-12, abs_tol=1e-15)
    assert r.lower_bound == r.makespan


medium = random_dags((4, 24), (6, 7))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(medium)
def test_exact_is_no_worse_than_any_heuristic(gt):
    graph, times = gt
    r = exact_order(graph, times)
    assert r.proven
    tol = 1e-12 * max(1.0, r.makespan)
    for algo, span in heuristic_orders(graph, times).items():
        assert r.makespan <= span + tol, (algo, span, r.makespan)


def test_exact_fixes_figure1():
    from tests.paper_graphs import figure1

    g, t = figure1()
    r = exact_order(g, t)
    assert r.order == ["recv1", "recv2"] and r.makespan == 3.0 and r.proven


def test_size_limit_and_time_limit():
    g, t = random_dag(60, 30, training=True, seed=4)
    with pytest.raises(DlschedError, match="time limit"):
        exact_order(g, t)
    r = exact_order(g, t, time_limit=0.5)
    assert sorted(r.priorities.values()) == list(range(30))
    assert r.lower_bound <= r.makespan + 1e-12
    assert math.isclose(simulate(g, t, r.priorities).makespan, r.makespan, rel_tol=1e-12)
    assert r.elapsed < 5
    # a hard instance: the search stops at the limit and says so
    g2, t2 = random_dag(40, 14, training=False, ps=1, seed=9, skip_prob=0.6, share_prob=0.5)
    r2 = exact_order(g2, t2, time_limit=0.05)
    assert r2.makespan >= r2.lower_bound - 1e-12
    if not r2.proven:
        assert r2.explored > 0


def test_optimality_gap_report_quick():
    """The gap benchmark on a few graphs: optima proven, no order below the optimum, TAC near it."""
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("bench_gap", REPO / "benchmarks" / "bench_optimality_gap.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    df = bench.measure(n_graphs=8, seed=3, params=(5, 7))
    assert len(df) == 8 and df["proven"].all()
    gaps = df[[c for c in df.columns if c.endswith("_gap")]]
    assert (gaps >= -1e-9).all().all()
    summary = bench.summarise(df).set_index("order")
    assert summary.loc["tac", "mean_gap_pct"] <= summary.filter(like="random", axis=0)["mean_gap_pct"].iloc[0]
