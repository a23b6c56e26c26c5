"""DDP's steady-state step and the ordered all-reduce (analyses/ddp_step.py, allreduce_order.py), and the order file."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.allreduce_order import (Piece, issue_order, make_pieces, ordered_schedule, param_elements,
                                              param_priorities)
from dlsched.analyses.ddp_buckets import DDPBucket, ddp_buckets_of
from dlsched.analyses.ddp_step import HostCosts, Network, check_cover, ddp_step, ordered_step
from dlsched.dag import COMPUTE, RECV, Graph, add_gradient_sends
from dlsched.errors import DlschedError, OracleError
from dlsched.formats.allreduce_order_file import (OrderFile, OrderFileError, OrderPiece, read_order_file,
                                                  write_order_file)
from dlsched.synthetic import random_dag

TOL = 1e-9
FREE = 1e300  #: a copy bandwidth that makes every copy take no time


def _chain():
    """x → f0(w0) → f1(w1) → loss, and backward b1 (grad w1) → b0 (grad w0); 1 s each, 1 MB per weight."""
    g = Graph("chain", "training")
    for p in ("w0", "w1"):
        g.add_op(p, RECV, bytes=1_000_000, params=250_000, shape=[250_000], dtypes=["float32"])
    for name, phase in (("f0", "forward"), ("f1", "forward"), ("b1", "backward"), ("b0", "backward")):
        g.add_op(name, COMPUTE, phase=phase)
    for u, v in [("w0", "f0"), ("f0", "f1"), ("w1", "f1"), ("f1", "b1"), ("b1", "b0"), ("w0", "b0")]:
        g.add_edge(u, v)
    add_gradient_sends(g, {"w1": "b1", "w0": "b0"})
    return g, {"f0": 1.0, "f1": 1.0, "b1": 1.0, "b0": 1.0}


def test_stock_step_by_hand():
    g, t = _chain()
    net = Network(alpha=0.0, beta=1e6, workers=2)  # ring, P=2: cost = n/β = 1 s per MB
    host = HostCosts(copy_bandwidth=FREE, optimizer_s_per_byte=0.0)  # copies free
    two = [DDPBucket(("w1",), 1_000_000, "float32"), DDPBucket(("w0",), 1_000_000, "float32")]
    step = ddp_step(g, t, two, net, host=host)
    # w1 ready at 3, all-reduced 3..4 beside b0; w0 ready at 4, 4..5; optimizer free: the step is 5 s.
    assert [(x.ready, x.start, x.end) for x in step.transfers] == [(3, 3, 4), (4, 4, 5)]
    assert step.step_s == 5 and step.compute_s == 4 and step.comm_s == 2 and step.exposed_comm_s == 1
    assert step.lower_s == 4 and step.upper_s == 6 and step.efficiency == pytest.approx(0.5)
    one = ddp_step(g, t, [DDPBucket(("w1", "w0"), 2_000_000, "float32")], net, host=host)
    assert one.step_s == 6 and one.efficiency == 0
    # Copies: 1 MB at 1 MB/s into each bucket in the hook (delaying b0) and 2 MB back in finalize.
    copied = ddp_step(g, t, two, net, gradient_as_bucket_view=False, host=HostCosts(1e6, 0.0))
    assert copied.step_s == pytest.approx(4 + 1 + 1 + 1 + 2) and copied.compute_s == 8
    # As bucket views, each gradient is divided in place instead: b1 2..4, b0 4..6, w0's bucket 6..7, no copy back.
    divided = ddp_step(g, t, two, net, host=HostCosts(1e6, 0.0))
    assert divided.step_s == pytest.approx(4 + 1 + 1 + 1) and divided.compute_s == 6


def test_contention_by_hand():
    """Compute twice as slow beside an all-reduce: b0 runs 3..4 at half speed beside w1's bucket, then 4..4.5
    alone; w0's bucket goes 4.5..5.5. Both lanes twice as slow beside each other: b0 and w1's bucket share 3..5."""
    g, t = _chain()
    net = Network(alpha=0.0, beta=1e6, workers=2)
    two = [DDPBucket(("w1",), 1_000_000, "float32"), DDPBucket(("w0",), 1_000_000, "float32")]
    step = ddp_step(g, t, two, net, host=HostCosts(FREE, 0.0, compute_beside_comm=2.0))
    assert [(x.start, x.end) for x in step.transfers] == [(3, 4), (4.5, 5.5)] and step.step_s == 5.5
    both = ddp_step(g, t, two, net, host=HostCosts(FREE, 0.0, compute_beside_comm=2.0,
                                                    comm_beside_compute=2.0))
    assert [(x.start, x.end) for x in both.transfers] == [(3, 5), (5, 6)] and both.step_s == 6
    # one bucket after backward: nothing overlaps, nothing slows
    one = [DDPBucket(("w1", "w0"), 2_000_000, "float32")]
    assert ddp_step(g, t, one, net, host=HostCosts(FREE, 0.0, compute_beside_comm=3.0,
                                                     comm_beside_compute=3.0)).step_s == 6
    with pytest.raises(DlschedError, match="slow-down from 1"):
        ddp_step(g, t, two, net, host=HostCosts(FREE, compute_beside_comm=0.5))


def test_ordered_step_by_hand():
    g, t = _chain()
    net = Network(alpha=0.0, beta=1e6, workers=2)
    host = HostCosts(copy_bandwidth=FREE, optimizer_s_per_byte=0.0)  # copies free
    # w0 first matters: the next forward needs it first. Pieces in issue order w1 then w0.
    pieces = [Piece((("w1", 0, 250_000),), 1_000_000), Piece((("w0", 0, 250_000),), 1_000_000)]
    step = ordered_step(g, t, pieces, net, host=host)
    # w0 is updated at 5; f0 runs 5..6; w1 (done at 4) is ready; f1 6..7, b1 7..8, b0 8..9: a 5 s period.
    assert step.step_s == pytest.approx(5)
    assert step.lower_s <= step.step_s <= step.upper_s
    # Half a second of the hook's own work per piece: w1's piece 3..4.5, w0's 4.5..6, the next f0 at 6.
    slow = ordered_step(g, t, pieces, net, host=HostCosts(FREE, 0.0, per_piece_s=0.5))
    assert slow.step_s == pytest.approx(6)
    # Copies at 1 MB/s. One slice per piece: reduced in place, then divided (1 s each) on the compute lane:
    # w1's division 4..5 while the next f0 waits; w0's 5..6, so f0 starts at 6.
    divided = ordered_step(g, t, pieces, net, host=HostCosts(1e6, 0.0))
    assert divided.step_s == pytest.approx(6) and divided.compute_s == pytest.approx(6)
    # One piece of both: gathered 4..6 and on the wire 6..8 (the link's node), divided and copied back 8..12;
    # f0 at 12.
    both = [Piece((("w1", 0, 250_000), ("w0", 0, 250_000)), 2_000_000)]
    gathered = ordered_step(g, t, both, net, host=HostCosts(1e6, 0.0))
    assert gathered.step_s == pytest.approx(12) and gathered.compute_s == pytest.approx(8)
    assert gathered.comm_s == pytest.approx(4)
    assert gathered.lower_s <= gathered.step_s <= gathered.upper_s
    with pytest.raises(DlschedError, match="cost per piece"):
        ordered_step(g, t, pieces, net, host=HostCosts(per_piece_s=-1.0))


def test_schedule_prefers_the_first_layer_when_both_are_ready():
    pieces = [Piece((("late", 0, 10),), 40), Piece((("early", 0, 10),), 40)]
    order = issue_order(pieces, {"early": 0, "late": 1}, {"early": 1.0, "late": 1.0}, cost=lambda n: 1.0)
    assert order == [1, 0]
    # When only the low-priority one is ready, the link does not idle waiting for the other.
    order = issue_order(pieces, {"early": 0, "late": 1}, {"early": 1.5, "late": 1.0}, cost=lambda n: 1.0)
    assert order == [0, 1]


def test_refusals():
    g, t = _chain()
    net = Network(0.0, 1e6, 2)
    with pytest.raises(DlschedError, match="at least 2 workers"):
        ddp_step(g, t, ddp_buckets_of(g), Network(0.0, 1e6, 1))
    with pytest.raises(DlschedError, match="exactly once"):
        ddp_step(g, t, [DDPBucket(("w1",), 1, "float32")], net)
    with pytest.raises(OracleError):
        ddp_step(g, {"f0": 1.0}, ddp_buckets_of(g), net)
    with pytest.raises(DlschedError, match="exactly once"):
        ordered_step(g, t, [Piece((("w1", 0, 250_000), ("w0", 0, 10)), 1)], net)
    inference = random_dag(5, 2, training=False)[0]
    with pytest.raises(DlschedError, match="inference"):
        ddp_step(inference, {}, [], net)
    with pytest.raises(DlschedError, match="positive"):
        make_pieces(["a"], {"a": 1}, {"a": 4}, 0)


graphs = st.builds(lambda n, p, seed: random_dag(n, p, training=True, seed=seed),
                   st.integers(2, 24), st.integers(1, 10), st.integers(0, 10_000))
networks = st.builds(Network, st.sampled_from([0.0, 1e-5, 1e-3]), st.sampled_from([1e6, 1e8, 1e10]),
                     st.integers(2, 16), st.sampled_from(["ring", "recursive-doubling"]))


@settings(max_examples=60, deadline=None)
@given(graphs, st.sampled_from([1024, 16 * 1024, 100_000, 1 << 30]), st.sampled_from(["tic", "topo", "ready"]))
def test_pieces_cover_every_element_once(gt, piece_bytes, priority):
    g, t = gt
    s = ordered_schedule(g, t, piece_bytes, cost=lambda n: 1e-4 + n / 1e9, priority=priority)
    check_cover(s.pieces, param_elements(g))
    assert all(p.bytes <= piece_bytes for p in s.pieces if len(p.slices) > 1 or p.slices[0][2] - p.slices[0][1] > 1)
    sizes = {op.name: op.bytes for op in g.recvs()}
    for p, n in param_elements(g).items():  # a parameter that fits in a piece is never split
        if sizes[p] <= piece_bytes:
            assert sum(p in piece.params for piece in s.pieces) == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 10), st.integers(1, 5000)), min_size=1, max_size=30))
def test_issue_order_is_a_permutation(rows):
    pieces = [Piece(((f"p{i}", 0, 1),), n) for i, (_, _, n) in enumerate(rows)]
    prio = {f"p{i}": r[0] for i, r in enumerate(rows)}
    ready = {f"p{i}": r[1] for i, r in enumerate(rows)}
    order = issue_order(pieces, prio, ready, cost=lambda n: n / 1000)
    assert sorted(order) == list(range(len(rows)))


@settings(max_examples=40, deadline=None)
@given(graphs, networks, st.sampled_from([0.01, 0.1, 1.0, 100.0]), st.booleans())
def test_stock_step_within_its_bounds(gt, net, cap, view):
    g, t = gt
    step = ddp_step(g, t, ddp_buckets_of(g, cap, times=t), net, gradient_as_bucket_view=view)
    assert step.lower_s - TOL <= step.step_s <= step.upper_s + TOL
    assert 0 <= step.efficiency <= 1
    for a, b in zip(step.transfers, step.transfers[1:]):  # one at a time, in launch order
        assert b.start >= a.end - TOL
    assert all(x.start >= x.ready - TOL for x in step.transfers)
    if not view:
        assert step.step_s >= ddp_step(g, t, ddp_buckets_of(g, cap, times=t), net).step_s - TOL


@settings(max_examples=30, deadline=None)
@given(graphs, networks, st.sampled_from([4096, 64 * 1024, 1 << 30]), st.sampled_from(["tic", "ready"]),
       st.sampled_from([1e6, 1e10]))
def test_ordered_step_within_its_bounds(gt, net, piece_bytes, priority, copy_bandwidth):
    g, t = gt
    s = ordered_schedule(g, t, piece_bytes, net.cost, priority)
    step = ordered_step(g, t, s.pieces, net, HostCosts(copy_bandwidth))  # the hook's copies as slow as the link
    assert step.lower_s * (1 - 1e-9) - TOL <= step.step_s <= step.upper_s * (1 + 1e-9) + TOL


@settings(max_examples=40, deadline=None)
@given(graphs, networks, st.sampled_from([0.01, 0.1, 100.0]))
def test_the_contention_loop_without_contention_is_the_plain_schedule(gt, net, cap):
    """The shared-lanes event loop at no slow-down gives the plain list schedule's times (fast = straightforward),
    and with a slow-down no lane finishes before its own work: T ≥ L."""
    import dlsched.analyses.ddp_step as ds
    g, t = gt
    buckets = ddp_buckets_of(g, cap, times=t)
    plain = ddp_step(g, t, buckets, net)
    real_run = ds.LaneDag.run
    try:
        ds.LaneDag.run = lambda self, slow=(1.0, 1.0): self._run_shared(slow)
        shared = ddp_step(g, t, buckets, net)
    finally:
        ds.LaneDag.run = real_run
    assert shared.step_s == pytest.approx(plain.step_s, rel=1e-9, abs=TOL)
    for a, b in zip(plain.transfers, shared.transfers):
        assert (a.start, a.end) == pytest.approx((b.start, b.end), rel=1e-9, abs=TOL)
    slowed = ddp_step(g, t, buckets, net, host=HostCosts(compute_beside_comm=1.7, comm_beside_compute=1.3))
    assert slowed.step_s >= slowed.lower_s - TOL


def _param_free_forward(g: Graph, t) -> float:
    """Compute time of forward ops that read no parameter at all (the next forward may run them early)."""
    need = {}
    for op in g.topological_order():
        preds = list(g.predecessors(op.name))
        need[op.name] = op.kind == RECV or any(need[p] for p in preds)
    return sum(t[op.name] for op in g.compute_ops() if op.phase == "forward" and not need[op.name])


@settings(max_examples=40, deadline=None)
@given(graphs, networks)
def test_one_piece_is_ddp_with_one_bucket(gt, net):
    """The whole model as one piece in ready order is stock DDP with one bucket; only forward ops that read no
    parameter may run before the update, which stock DDP's optimizer.step() holds back."""
    g, t = gt
    whole = sum(s.bytes for s in g.sends())
    s = ordered_schedule(g, t, whole, net.cost, "ready")
    assert len(s.pieces) == 1
    free = HostCosts(copy_bandwidth=FREE)  # the hooks' copies differ (the piece is gathered, DDP's is not)
    ordered = ordered_step(g, t, s.pieces, net, free).step_s
    stock = ddp_step(g, t, ddp_buckets_of(g, whole / 1024**2 + 1, times=t), net, host=free).step_s
    assert stock - _param_free_forward(g, t) - TOL <= ordered <= stock + 1e-9 * stock + TOL


def test_priorities_are_distinct_ranks():
    g, t = random_dag(30, 9, training=True, seed=7)
    for algo in ("tic", "topo", "ready"):
        assert sorted(param_priorities(g, algo, t).values()) == list(range(9))
    with pytest.raises(DlschedError, match="unknown priority"):
        param_priorities(g, "tac")


def test_order_file_round_trip_and_refusals(tmp_path):
    f = OrderFile("m", "fp", 4, 1024, [OrderPiece((("a.weight", 0, 10), ("a.bias", 0, 2)), 48, 0),
                                       OrderPiece((("b.weight", 0, 256),), 1024, 1)])
    path = tmp_path / "o.json"
    write_order_file(f, path)
    assert read_order_file(path) == f
    good = json.loads(path.read_text())
    hostile = [("not json", "not JSON"),
               (json.dumps({**good, "format": "dlsched.priorities"}), "not an all-reduce order file"),
               (json.dumps({**good, "version": 2}), "version 2"),
               (json.dumps({**good, "world": -1}), "world"),
               (json.dumps({**good, "pieces": []}), "non-empty"),
               (json.dumps({**good, "pieces": [{"slices": [["a", 5, 2]], "bytes": 1, "priority": 0}]}), "reversed"),
               (json.dumps({**good, "pieces": [{"slices": [["a", -1, 2]], "bytes": 1, "priority": 0}]}), "≥ 0"),
               (json.dumps({**good, "pieces": [{"slices": [["a", 0, 1.5]], "bytes": 1, "priority": 0}]}), "whole"),
               (json.dumps({**good, "pieces": [{"slices": [[3, 0, 1]], "bytes": 1, "priority": 0}]}), "slice"),
               (json.dumps({**good, "model": "m"}), "model")]
    for text, needle in hostile:
        path.write_text(text)
        with pytest.raises(OrderFileError, match=needle):
            read_order_file(path)
    with pytest.raises(OrderFileError, match="cannot read"):
        read_order_file(tmp_path / "missing.json")


def test_documented_uses_fit_the_budget():
    from dlsched import limits
    from dlsched.analyses.ddp_step import ITERATIONS
    from dlsched.planning.ddp_plan import default_caps, default_piece_sizes

    # ResNet-50's training DAG (1,372 ops, 161 gradients, 97.5 MiB), default caps and piece sizes
    model = int(97.5 * 1024**2)
    pieces = [-(-model // p) + 161 for p in default_piece_sizes(model)]
    work = limits.ddp_plan_work(1_372, len(default_caps(model)), pieces, ITERATIONS)
    assert work.amount <= limits.PLAN_DDP.limit // 10


def test_first_iteration_and_unused_parameter_buckets():
    """Before DDP's rebuild the whole model is one bucket (the step of one bucket); with
    find_unused_parameters=True the buckets run in reverse registration order and never rebuild."""
    g, t = random_dag(20, 8, training=True, seed=11)
    net = Network(1e-4, 1e8, 4)
    first = ddp_step(g, t, ddp_buckets_of(g, rebuilt=False), net)
    whole = sum(s.bytes for s in g.sends())
    one = ddp_step(g, t, [DDPBucket(tuple(p.name for p in g.recvs()), whole, "float32")], net)
    assert len(first.transfers) == 1 and first.step_s == pytest.approx(one.step_s)
    unused = ddp_step(g, t, ddp_buckets_of(g, 0.05, find_unused_parameters=True), net)
    assert unused.lower_s - TOL <= unused.step_s <= unused.upper_s + TOL
