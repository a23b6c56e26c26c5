"""The dependency-aware lower bound (issue: numbers a user can trust, item 10).

It must never exceed a makespan any order reaches, must dominate TicTac's L and
the critical path, and Jackson's preemptive schedule must equal the
straightforward one-machine bound (Carlier: the largest min-head + work +
min-tail over subsets of jobs)."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.bounds import bounds
from dlsched.analyses.dependency_bound import dependency_bound, jackson_preemptive
from dlsched.analyses.orders import compute_order, random_order
from dlsched.analyses.simulate import simulate
from dlsched.synthetic import random_dag

jobs = st.lists(st.tuples(st.integers(0, 10), st.integers(0, 6), st.integers(0, 10)), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(jobs)
def test_jackson_equals_the_best_subset_bound(js):
    heads, durs, tails = map(list, zip(*js))
    straightforward = max(min(heads[j] for j in s) + sum(durs[j] for j in s) + min(tails[j] for j in s)
                          for k in range(1, len(js) + 1) for s in itertools.combinations(range(len(js)), k))
    assert jackson_preemptive(heads, durs, tails) == straightforward


@settings(max_examples=200, deadline=None)
@given(jobs)
def test_jackson_never_beats_a_real_one_machine_schedule(js):
    heads, durs, tails = map(list, zip(*js))
    best = float("inf")
    for perm in itertools.permutations(range(len(js))):
        t = obj = 0
        for j in perm:
            t = max(t, heads[j]) + durs[j]
            obj = max(obj, t + tails[j])
        best = min(best, obj)
    assert jackson_preemptive(heads, durs, tails) <= best


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 25), st.integers(1, 8), st.booleans(), st.integers(1, 3), st.integers(0, 10_000))
def test_bound_holds_under_every_order(n_compute, n_params, training, ps, seed):
    graph, times = random_dag(n_compute, n_params, training=training, ps=ps, seed=seed)
    dep = dependency_bound(graph, times)
    b = bounds(graph, times)
    assert dep.lower >= b.lower - 1e-9 and dep.lower >= dep.critical_path - 1e-9
    assert dep.lower <= b.upper + 1e-9
    orders = [compute_order(graph, a, times) for a in ("tic", "tac", "topo")]
    orders += [random_order(graph, s) for s in range(3)] + [None]
    for order in orders:
        assert dep.lower <= simulate(graph, times, order, seed=seed).makespan + 1e-9


def test_training_chain_needs_all_three_phases():
    """Sends wait for the backward, which waits for the recvs: L misses that, the bound does not."""
    graph, times = random_dag(30, 6, training=True, seed=3)
    dep, b = dependency_bound(graph, times), bounds(graph, times)
    best = min(simulate(graph, times, compute_order(graph, a, times)).makespan for a in ("tic", "tac", "topo"))
    assert b.lower < dep.lower <= best
    assert set(dep.per_resource) == set(b.loads)


def test_missing_times_are_an_oracle_error():
    from dlsched.errors import OracleError
    graph, times = random_dag(5, 2)
    times.pop(next(iter(times)))
    with pytest.raises(OracleError):
        dependency_bound(graph, times)


def test_bert_training_scores_near_one_against_the_dependency_bound(tmp_path):
    """Single-worker BERT training: TicTac's E reads as a bad order, yet TAC is within a few % of
    what the dependencies allow; `bounds --makespan` says both."""
    import json

    from tests.conftest import run_cli
    dag, oracle = tmp_path / "bert.dag.json", tmp_path / "oracle.csv"
    for args in (("inspect", "examples/hf_models.py:bert", "--mode", "training", "--save", dag),
                 ("profile", dag, "--analytic", "-o", oracle)):
        proc = run_cli(*args, timeout=600)
        assert proc.returncode == 0, proc.stderr
    sim = json.loads(run_cli("simulate", dag, "--oracle", oracle, "--algo", "tac", "--json").stdout)
    out = json.loads(run_cli("bounds", dag, "--oracle", oracle, "--makespan", str(sim["makespan"]), "--json").stdout)
    assert out["efficiency"] < 0.5 and out["dependency_efficiency"] >= 0.9, out
    assert out["lower"] < out["dependency_lower"] <= sim["makespan"] + 1e-12
    assert sim["dependency_lower"] == out["dependency_lower"]  # simulate says it too
    assert sim["dependency_efficiency"] == out["dependency_efficiency"]
