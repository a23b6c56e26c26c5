"""Orders side by side (dlsched.analyses.compare) and the simulate / order answers built on it."""
from __future__ import annotations

import contextlib
import statistics

import pytest

from dlsched.analyses.compare import (RANDOM_SEEDS, compare_orders, parse_orders, random_seeds, run_order,
                                      simulation_count)
from dlsched.answers.options import ModelSpec, OracleSpec, OrderChoice
from dlsched.answers.order import order
from dlsched.analyses.orders import ALGORITHMS, ORDERS, compute_order
from dlsched.analyses.regression import model_metrics
from dlsched.analyses.simulate import simulate
from dlsched.analyses.compare import check_simulate_work
from dlsched.answers.simulate import Outputs, Run
from dlsched.answers.simulate import simulate as simulate_answer
from dlsched.errors import DlschedError, WorkLimitError
from dlsched.synthetic import random_dag


@pytest.fixture(scope="module")
def net():
    return random_dag(40, 8, training=True, ps=2, seed=11)


def test_random_is_the_mean_over_seeds_seed_to_seed_plus_four(net):
    g, t = net
    assert list(random_seeds(7)) == [7, 8, 9, 10, 11] and RANDOM_SEEDS == 5
    rows = compare_orders(g, t, ["random", "tac"], seed=7).set_index("algorithm")
    spans = [simulate(g, t, compute_order(g, "random", seed=s), seed=s).makespan for s in random_seeds(7)]
    assert rows.loc["random", "makespan"] == statistics.fmean(spans)
    assert rows.loc["tac", "makespan"] == simulate(g, t, compute_order(g, "tac", t), seed=7).makespan
    assert rows.loc["tac", "straggler_share"] == 0.0


def test_the_ci_gate_uses_the_same_definition_at_seed_0(net):
    g, t = net
    rows = compare_orders(g, t, ["tac", "random"]).set_index("algorithm")
    m = model_metrics(g, t)["metrics"]
    assert m["tac_makespan"] == float(f"{rows.loc['tac', 'makespan']:.9g}")
    assert m["random_makespan"] == float(f"{rows.loc['random', 'makespan']:.9g}")
    assert m["random_efficiency"] == float(f"{rows.loc['random', 'efficiency']:.9g}")


def test_given_orders_run_once_and_rows_keep_the_order_asked(net):
    g, t = net
    prio = compute_order(g, "random", seed=3)
    rows = compare_orders(g, t, ["unordered", "random"], seed=3, given={"random": prio})
    assert rows.algorithm.tolist() == ["unordered", "random"]
    assert rows.makespan.tolist() == [simulate(g, t, None, seed=3).makespan, simulate(g, t, prio).makespan]


def test_several_workers(net):
    g, t = net
    rows = compare_orders(g, t, ["tac", "unordered"], workers=3, iterations=4, jitter=0.1, seed=2)
    assert (rows.straggler_share >= 0).all() and (rows.makespan > 0).all()
    r = run_order(g, t, compute_order(g, "tac", t), seed=2, workers=3, iterations=4, jitter=0.1)
    assert rows.makespan[0] == r.makespan and len(r.per_worker) == 3 and len(r.per_iteration) == 4


def test_parse_orders_and_counts():
    assert ORDERS == ("tic", "tac", "random", "topo", "exact", "unordered")
    assert set(ORDERS) - {"unordered"} <= set(ALGORITHMS)
    assert parse_orders(" tac, ,random") == ["tac", "random"] and parse_orders("") == []
    with pytest.raises(DlschedError, match="unknown order.*layer.*choose from tic, tac"):
        parse_orders("tac,layer")
    assert simulation_count(["tic", "random", "random"]) == 1 + 2 * RANDOM_SEEDS


def test_reporter_gets_one_stage_per_search_and_one_for_the_simulations():
    g, t = random_dag(12, 4, seed=3, integer_times=True)
    stages = []

    @contextlib.contextmanager
    def reporter(description, total=None, unit=""):
        seen = []
        stages.append((description, total, unit, seen))
        yield lambda done, total=None: seen.append(done)

    compare_orders(g, t, ["exact", "random"], time_limit=5, reporter=reporter)
    (search, _, search_unit, _), (sim, total, unit, done) = stages
    assert search == f"searching the exact order of {g.name} (at most 5 s)" and search_unit == "search nodes"
    assert sim == f"simulating {g.name}" and unit == "op-steps"
    assert total == len(g) * (1 + RANDOM_SEEDS) and done[-1] == total


def test_simulate_answer_matches_its_parts(net):
    g, t = net
    r = simulate_answer(ModelSpec.of(g), OracleSpec.of(t), OrderChoice("tac", seed=1), Run(compare=["tic", "random"]))
    rows = compare_orders(g, t, ["tic", "random"], seed=1)
    assert r.figures["compare"] == rows.to_dict(orient="records")
    assert r.figures["makespan"] == simulate(g, t, compute_order(g, "tac", t)).makespan
    assert not r.multi and r.detail == {} and r.run.timeline is None
    multi = simulate_answer(ModelSpec.of(g), OracleSpec.of(t), OrderChoice(),
                            Run(workers=2, iterations=2, compare=["tac"]), Outputs(timeline=True))
    assert multi.multi and set(multi.detail) == {"per_worker", "per_iteration"}
    assert {"iteration_time", "straggler_share", "worker_efficiency", "sharing", "jitter"} <= set(multi.figures)
    assert multi.run.timeline is not None and multi.figures["algorithm"] == "unordered"


def test_simulate_work_is_refused_before_and_after_loading():
    with pytest.raises(WorkLimitError, match="7 runs"):
        check_simulate_work(10_000, 10, 1_000, ["tac", "random"])
    check_simulate_work(10_000, 10, 1_000, ["tac", "random"], max_work=10**9)


def test_order_answer(net):
    g, t = net
    d = order(ModelSpec.of(g), OracleSpec.of(t), OrderChoice("random", seed=4)).to_dict("x.json", "json")
    prio = compute_order(g, "random", seed=4)
    assert d["makespan"] == simulate(g, t, prio, seed=4).makespan  # one draw, not the mean over seeds
    assert d["unordered_makespan"] == simulate(g, t, None, seed=4).makespan
    assert list(d)[:8] == ["model", "mode", "algorithm", "transfers", "distinct_priorities", "output", "format",
                           "oracle"]
    plain = order(ModelSpec.of(g), OracleSpec(None), OrderChoice("tic")).to_dict("y.tsv", "tictac")
    assert plain["oracle"] is None and plain["makespan"] is None and "upper" not in plain


def test_commands_offer_the_library_lists():
    from dlsched.cli.order_cmd import order
    from dlsched.cli.simulate_cmd import simulate as simulate_cmd

    def choices(command):
        return tuple(next(p for p in command.params if p.name == "algo").type.choices)

    assert choices(simulate_cmd) == ORDERS and choices(order) == ALGORITHMS
