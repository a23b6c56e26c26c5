"""The iteration simulator: TicTac Figure 1, properties over random DAGs, a reference simulator, multi-worker."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses.multiworker import simulate_workers
from dlsched.analyses.simulate import simulate
from dlsched.dag import COMPUTE, RECV, Graph
from dlsched.errors import DlschedError, OracleError
from dlsched.synthetic import random_dag
from tests.paper_graphs import figure1


def test_figure1_good_and_bad_order():
    g, t = figure1()
    good = simulate(g, t, {"recv1": 0, "recv2": 1})
    bad = simulate(g, t, {"recv2": 0, "recv1": 1})
    assert good.makespan == 3.0
    assert bad.makespan == 4.0
    assert good.start["op1"] == 1.0 and good.start["op2"] == 2.0
    assert bad.start["op1"] == 2.0 and bad.end["op2"] == 4.0
    assert good.transfer_order() == ["recv1", "recv2"]
    f = good.frame()
    assert list(f.columns) == ["op", "kind", "resource", "start", "end", "priority"]
    assert f.set_index("op").loc["recv2", "priority"] == 1


def test_unordered_baseline_draws_both_orders_and_is_seeded():
    g, t = figure1()
    spans = {simulate(g, t, seed=s).makespan for s in range(20)}
    assert spans == {3.0, 4.0}
    assert simulate(g, t, seed=7).makespan == simulate(g, t, seed=7).makespan


def test_unprioritised_transfers_go_last():
    g, t = figure1()
    # recv2 has a priority, recv1 none: recv2 first, whatever the seed
    for s in range(5):
        assert simulate(g, t, {"recv2": 5}, seed=s).transfer_order() == ["recv2", "recv1"]


def test_bad_input():
    g, t = figure1()
    with pytest.raises(OracleError, match="op2"):
        simulate(g, {k: v for k, v in t.items() if k != "op2"})
    with pytest.raises(DlschedError, match="op1"):
        simulate(g, t, {"op1": 0})


# -- the reference simulator: slow, obviously correct ----------------------------

def reference_makespan(graph, times, priorities):
    """Decision-point simulation straight from DESIGN §4.6 with an explicit
    priority map (recvs without one go after, in canonical order)."""
    ops = graph.ops()
    preds = {op.name: set(graph.predecessors(op.name)) for op in ops}
    done, ready_at, running, start, end = set(), {}, {}, {}, {}
    t = 0.0
    while len(done) < len(ops):
        for r, (name, e) in list(running.items()):
            if e == t:
                done.add(name)
                del running[r]
        for op in ops:
            if op.name not in ready_at and preds[op.name] <= done:
                ready_at[op.name] = t
        for r in graph.resources():
            if r in running:
                continue
            cands = [op for op in ops if op.resource == r and op.name in ready_at and op.name not in start]
            if not cands:
                continue
            if r.endswith("/down"):
                best = min(cands, key=lambda o: (0, priorities[o.name], o.index) if o.name in priorities
                           else (1, 0, o.index))
            else:
                best = min(cands, key=lambda o: (ready_at[o.name], o.index))
            start[best.name] = t
            end[best.name] = t + times[best.name]
            running[r] = (best.name, end[best.name])
        if any(e == t for _, e in running.values()):
            continue
        if running:
            t = min(e for _, e in running.values())
    return max(end.values(), default=0.0), start, end


graphs = st.builds(
    lambda n, p, training, ps, seed, integer: random_dag(n, p, training=training, ps=ps, seed=seed,
                                                         integer_times=integer),
    st.integers(1, 30), st.integers(0, 10), st.booleans(), st.integers(1, 3), st.integers(0, 10**6), st.booleans())


def draw_priorities(data_rng: random.Random, graph, mode: str):
    names = [r.name for r in graph.recvs()]
    if mode == "none":
        return None
    if mode == "strict":
        data_rng.shuffle(names)
        return {n: i for i, n in enumerate(names)}
    if mode == "ties":
        return {n: data_rng.randint(0, 2) for n in names}
    return {n: data_rng.randint(0, 5) for n in names if data_rng.random() < 0.5}  # partial


def bounds_of(graph, times):
    upper = sum(times.values())
    loads = {}
    for op in graph.ops():
        loads[op.resource] = loads.get(op.resource, 0.0) + times[op.name]
    return upper, max(loads.values(), default=0.0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.sampled_from(["none", "strict", "ties", "partial"]), st.integers(0, 1000))
def test_properties_on_random_dags(gt, mode, seed):
    graph, times = gt
    prio = draw_priorities(random.Random(seed), graph, mode)
    # the reference orders transfers without a priority canonically
    unordered = "canonical" if mode == "partial" or (mode == "none" and seed % 2) else "random"
    s = simulate(graph, times, prio, seed=seed, unordered=unordered)
    m = s.makespan
    upper, lower = bounds_of(graph, times)
    tol = 1e-9 * max(1.0, upper)
    assert lower - tol <= m <= upper + tol
    if upper > lower:
        e = (upper - m) / (upper - lower)
        assert -1e-9 <= e <= 1 + 1e-9
    start, end = s.start, s.end
    for u, v in graph.edges():
        assert end[u] <= start[v] + tol, (u, v)
    for name in start:
        assert math.isclose(end[name] - start[name], times[name], rel_tol=1e-9, abs_tol=1e-12)
    by_res = {}
    for op in graph.ops():
        by_res.setdefault(op.resource, []).append((start[op.name], end[op.name]))
    for spans in by_res.values():
        spans.sort()
        for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
            assert e0 <= s1 + tol
    # The fast simulator equals the reference under the same explicit order.
    if mode == "none":
        explicit = {n: i for i, n in enumerate(s.transfer_order())}
        if unordered == "canonical":
            for r in graph.resources():
                served = sorted((op for op in graph.recvs() if op.resource == r), key=lambda o: start[o.name])
                assert [o.index for o in served] == sorted(o.index for o in served)
    else:
        explicit = prio
    ref, _, _ = reference_makespan(graph, times, explicit)
    assert math.isclose(ref, m, rel_tol=1e-12, abs_tol=1e-12), (ref, m)


def test_no_idling_while_work_is_ready():
    """Work-conserving: whenever a resource is idle, none of its ops is ready."""
    g, t = random_dag(60, 15, training=True, ps=2, seed=11)
    s = simulate(g, t, seed=3)
    start, end = s.start, s.end
    for op in g.ops():
        ready = max((end[p] for p in g.predecessors(op.name)), default=0.0)
        if start[op.name] > ready:
            # something else was running on that resource just before it started
            assert any(abs(end[o.name] - start[op.name]) < 1e-12 for o in g.ops()
                       if o.resource == op.resource and o.name != op.name)


# -- multi-worker -------------------------------------------------------------------

@pytest.mark.parametrize("sharing", ["serial", "fair"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_worker_equals_single_worker_simulator(sharing, seed):
    g, t = random_dag(50, 12, training=True, ps=1 + seed, seed=seed, integer_times=seed == 1)
    prio = {r.name: i for i, r in enumerate(reversed(g.recvs()))}
    r = simulate_workers(g, t, workers=1, priorities=prio, iterations=2, sharing=sharing)
    assert r.per_iteration["iteration_time"].tolist() == [simulate(g, t, prio).makespan] * 2
    assert r.per_iteration["straggler_share"].tolist() == [0.0, 0.0]


def test_straggler_share_range_and_unordered_workers_differ():
    g, t = random_dag(40, 16, training=True, ps=2, seed=5)
    r = simulate_workers(g, t, workers=4, iterations=20, seed=3)
    share = r.per_iteration["straggler_share"]
    assert ((share >= 0) & (share < 1)).all()
    assert share.max() > 0  # random orders per worker make stragglers
    assert len(r.per_worker) == 80
    s = r.summary()
    assert s["iteration_time"]["p50"] <= s["iteration_time"]["p95"] <= s["iteration_time"]["max"]
    it = r.per_iteration.set_index("iteration")["iteration_time"]
    assert (r.per_worker.groupby("iteration")["makespan"].max() == it).all()


def test_enforced_identical_workers_have_no_stragglers_with_fair_links():
    g, t = random_dag(40, 16, training=True, ps=2, seed=5)
    prio = {r.name: i for i, r in enumerate(g.recvs())}
    r = simulate_workers(g, t, workers=4, priorities=prio, iterations=3, sharing="fair")
    assert (r.per_iteration["straggler_share"] == 0).all()
    assert r.per_iteration["iteration_time"].nunique() == 1


def test_enforced_serial_links_are_deterministic_and_jitter_varies_iterations():
    g, t = random_dag(40, 16, training=True, ps=2, seed=5)
    prio = {r.name: i for i, r in enumerate(g.recvs())}
    r = simulate_workers(g, t, workers=3, priorities=prio, iterations=3)  # serial: one transfer at a time
    assert r.per_iteration["iteration_time"].nunique() == 1
    assert (r.per_iteration["straggler_share"] < 0.5).all()
    # the shared link serialises the workers' transfers: no faster than one worker alone
    assert r.per_iteration["iteration_time"].iloc[0] >= simulate(g, t, prio).makespan - 1e-12
    j = simulate_workers(g, t, workers=3, priorities=prio, iterations=5, jitter=0.2, seed=1)
    assert j.per_iteration["iteration_time"].nunique() == 5
    assert j.per_iteration["straggler_share"].max() > 0
    j2 = simulate_workers(g, t, workers=3, priorities=prio, iterations=5, jitter=0.2, seed=1)
    assert j.per_iteration.equals(j2.per_iteration)


def test_multiworker_rejects_bad_arguments():
    g, t = figure1()
    for kw in ({"workers": 0}, {"iterations": 0}, {"jitter": -1.0}, {"sharing": "magic"}):
        with pytest.raises(DlschedError):
            simulate_workers(g, t, **kw)


def expanded_graph(graph, times, workers, ranks):
    """W copies of ``graph`` on one big DAG: own compute per worker, shared links.

    Channel ties follow the multi-worker rule (transfer rank, then worker turn;
    sends first-ready, then worker turn, then canonical index), encoded as
    priorities and canonical indices so the single-worker reference applies.
    """
    n = len(graph)
    big = Graph("expanded")
    big_times, prio = {}, {}
    for w in range(workers):
        for op in graph.ops():
            name = f"w{w}/{op.name}"
            resource = f"compute:{w}" if op.kind == COMPUTE else op.resource
            big.add_op(name, op.kind, index=w * n + op.index, resource=resource)
            big_times[name] = times[op.name]
            if op.kind == RECV:
                prio[name] = ranks[w][op.name] * workers + w
        for u, v in graph.edges():
            big.add_edge(f"w{w}/{u}", f"w{w}/{v}")
    return big, big_times, prio


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.builds(lambda n, p, training, ps, seed: random_dag(n, p, training=training, ps=ps, seed=seed),
                 st.integers(1, 12), st.integers(1, 6), st.booleans(), st.integers(1, 2), st.integers(0, 10**6)),
       st.integers(2, 3), st.booleans(), st.integers(0, 100))
def test_serial_multiworker_matches_reference_on_expanded_graph(gt, workers, enforced, seed):
    graph, times = gt
    prio = {r.name: i for i, r in enumerate(reversed(graph.recvs()))} if enforced else None
    r = simulate_workers(graph, times, workers=workers, priorities=prio, seed=seed, sharing="serial")
    tl = r.timeline
    ranks = []
    for w in range(workers):
        recv = tl[(tl["worker"] == w) & (tl["kind"] == "recv")].copy()
        recv["index"] = [graph.op(n).index for n in recv["op"]]
        order = recv.sort_values(["priority", "index"])["op"].tolist()
        ranks.append({name: k for k, name in enumerate(order)})
    big, big_times, big_prio = expanded_graph(graph, times, workers, ranks)
    _, _, end = reference_makespan(big, big_times, big_prio)
    for w in range(workers):
        ref = max(e for name, e in end.items() if name.startswith(f"w{w}/"))
        assert math.isclose(ref, r.per_worker.loc[r.per_worker["worker"] == w, "makespan"].iloc[0],
                            rel_tol=1e-12, abs_tol=1e-15)


def test_link_sharing_by_hand():
    """Two workers, one parameter (1 s on the link), one op (1 s): worked out by hand."""
    g = Graph("one")
    g.add_op("w", RECV)
    g.add_op("op", COMPUTE)
    g.add_edge("w", "op")
    t = {"w": 1.0, "op": 1.0}
    serial = simulate_workers(g, t, workers=2, priorities={"w": 0}, sharing="serial")
    # one transfer at a time: worker 0 gets it at 1 s, worker 1 at 2 s
    assert sorted(serial.per_worker["makespan"]) == [2.0, 3.0]
    assert serial.per_iteration["straggler_share"].iloc[0] == pytest.approx(1 / 3)
    fair = simulate_workers(g, t, workers=2, priorities={"w": 0}, sharing="fair")
    # both transfers share the link at half rate and end at 2 s
    assert fair.per_worker["makespan"].tolist() == [3.0, 3.0]
    three = simulate_workers(g, {"w": 1.0, "op": 0.5}, workers=3, priorities={"w": 0}, sharing="fair")
    assert three.per_worker["makespan"].tolist() == [3.5, 3.5, 3.5]
    # the worker served first rotates between iterations
    rot = simulate_workers(g, t, workers=2, priorities={"w": 0}, iterations=2, sharing="serial")
    first = rot.per_worker.pivot(index="iteration", columns="worker", values="makespan")
    assert first.loc[0].tolist() == [2.0, 3.0] and first.loc[1].tolist() == [3.0, 2.0]


def test_fair_sharing_speeds_up_when_a_stream_empties():
    from dlsched.analyses.multiworker import run_workers
    from dlsched.analyses.simulate import compile_graph, transfer_ranks

    g = Graph("one")
    g.add_op("w", RECV)
    g.add_op("op", COMPUTE)
    g.add_edge("w", "op")
    sg = compile_graph(g, {"w": 1.0, "op": 1.0})
    rank = transfer_ranks(sg, {"w": 0})
    # worker 0's transfer is 1 s of work, worker 1's 3 s: half rate each until 2 s, then full rate
    _, end = run_workers(sg, [[1.0, 1.0], [3.0, 1.0]], [rank, rank], [0, 1], "fair")
    assert end[0] == [2.0, 3.0] and end[1] == [4.0, 5.0]
    _, end = run_workers(sg, [[1.0, 1.0], [3.0, 1.0]], [rank, rank], [0, 1], "serial")
    assert end[0] == [1.0, 2.0] and end[1] == [4.0, 5.0]


def test_chrome_trace_and_gantt_of_figure1(tmp_path):
    import json

    from dlsched.formats.chrome_trace import write_chrome_trace
    from dlsched.formats.gantt import plot_gantt

    g, t = figure1()
    s = simulate(g, t, {"recv1": 0, "recv2": 1})
    path = tmp_path / "fig1.json"
    write_chrome_trace(s.frame(), path, model="fig1", metadata={"makespan_s": s.makespan})
    doc = json.loads(path.read_text())
    spans = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert spans["op2"]["ts"] == 2e6 and spans["op2"]["dur"] == 1e6
    assert spans["recv2"]["args"] == {"kind": "recv", "worker": 0, "resource": "ps:0/down", "priority": 1}
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads[spans["op1"]["tid"]] == "compute:0" and threads[spans["recv1"]["tid"]] == "ps:0/down"
    assert doc["otherData"]["makespan_s"] == 3.0
    png = tmp_path / "fig1.png"
    plot_gantt(s.frame(), png, model="fig1", order="tac", efficiency=1.0, color_by="kind")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_gantt_of_a_large_multiworker_timeline(tmp_path):
    from dlsched.formats.gantt import plot_gantt

    g, t = random_dag(1000, 100, training=True, ps=2, seed=1)
    r = simulate_workers(g, t, workers=2, seed=1)
    assert len(r.timeline) == 2 * len(g)
    plot_gantt(r.timeline, tmp_path / "big.png", model=g.name, order="unordered")
    assert (tmp_path / "big.png").stat().st_size > 10_000


def test_timeline_keeps_whole_iterations_end_to_end(monkeypatch):
    import dlsched.analyses.multiworker as mw

    g, t = random_dag(30, 8, training=True, ps=2, seed=2)
    r = simulate_workers(g, t, workers=3, iterations=4, seed=1, sharing="fair")
    tl, times = r.timeline, r.per_iteration["iteration_time"].tolist()
    assert sorted(tl["iteration"].unique()) == [0, 1, 2, 3] and len(tl) == 4 * 3 * len(g)
    for it in range(4):  # iteration k starts where k − 1 ended and lasts its iteration time
        ops = tl[tl["iteration"] == it]
        assert ops["start"].min() >= sum(times[:it]) - 1e-12
        assert ops["end"].max() == pytest.approx(sum(times[:it + 1]), abs=1e-9)
    monkeypatch.setattr(mw, "TIMELINE_ROWS", 2 * 3 * len(g) + 1)  # room for two whole iterations
    assert sorted(simulate_workers(g, t, workers=3, iterations=4, seed=1).timeline["iteration"].unique()) == [0, 1]
    monkeypatch.setattr(mw, "TIMELINE_ROWS", 1)  # the first is always kept
    assert simulate_workers(g, t, workers=3, iterations=4, seed=1).timeline["iteration"].unique().tolist() == [0]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 1000))
def test_zero_time_ops_match_the_reference(gt, seed):
    """Ops of zero time (untimed glue ops) finish and release successors at the same instant."""
    graph, times = gt
    rng = random.Random(seed)
    times = {k: (0.0 if rng.random() < 0.3 else v) for k, v in times.items()}
    prio = draw_priorities(rng, graph, "strict")
    s = simulate(graph, times, prio)
    ref, _, _ = reference_makespan(graph, times, prio or {})
    assert math.isclose(ref, s.makespan, rel_tol=1e-12, abs_tol=1e-15)
    for u, v in graph.edges():
        assert s.end[u] <= s.start[v]
