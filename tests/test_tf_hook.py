"""TensorFlow hook (DESIGN §6): control dependencies between variable reads in
priority order, checked on GraphDefs and in a real local TF cluster (ps and
worker tasks as separate processes over localhost gRPC)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(400)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _v1_graph():
    import tensorflow as tf
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 8])
        h = x
        for i in range(4):
            w = tf.compat.v1.Variable(tf.ones([8, 8]), name=f"w{i}")
            h = tf.matmul(h, w)
    return g


def test_graph_def_gets_windowed_control_edges():
    from dlsched.hooks.tf_order import order_graph_def
    tf = pytest.importorskip("tensorflow")
    with tf.Graph().as_default():
        tf.compat.v1.disable_resource_variables()
        gd = _v1_graph().as_graph_def()
    order = ["w3", "w1", "w0", "w2"]
    out = order_graph_def(gd, order, window=2)
    ctrl = {n.name: [i[1:] for i in n.input if i.startswith("^")] for n in out.node}
    reads = {n.name for n in out.node if n.name.endswith("/read") or n.op == "ReadVariableOp"}
    assert reads, [n.op for n in out.node]
    read_of = {v: [r for r in reads if r.startswith(v + "/")] for v in order}
    # read i waits for read i-2, nothing else
    for i, v in enumerate(order):
        for r in read_of[v]:
            want = sorted(read_of[order[i - 2]]) if i >= 2 else []
            assert sorted(c for c in ctrl[r] if c in reads) == want
    assert all(not n.input or not n.input[-1].startswith("^") for n in gd.node if n.name in reads)  # copy


def test_unknown_transfer_and_cycle_are_clean_errors():
    from dlsched.errors import GraphError, PriorityFileError
    from dlsched.hooks.tf_order import plan_edges, _check_acyclic
    nodes = {"v": ("VariableV2", [], ""), "v/read": ("Identity", ["v"], ""),
             "u": ("VariableV2", [], ""), "u/read": ("Identity", ["u", "^v/read"], "")}
    with pytest.raises(PriorityFileError, match="match no variable read"):
        plan_edges(nodes, ["v", "nope"])
    edges = plan_edges(nodes, ["u", "v"])
    assert edges == [("u/read", "v/read")]
    with pytest.raises(GraphError, match="cycle"):
        _check_acyclic(nodes, edges)


def test_tf_function_reads_are_ordered():
    tf = pytest.importorskip("tensorflow")
    from dlsched.hooks.tf_order import order_function
    vs = [tf.Variable(tf.random.stateless_normal([8, 8], seed=[i, 0]), name=f"v{i}") for i in range(3)]

    @tf.function
    def f(x):
        for v in vs:
            x = tf.matmul(x, v)
        return x
    x = tf.ones([2, 8])
    g = order_function(f, ["v2", "v0", "v1"], 1, tf.TensorSpec([2, 8], tf.float32))
    assert len(g.dlsched_edges) >= 2
    gd = g.graph.as_graph_def()
    reads = [n for n in gd.node if n.op == "ReadVariableOp"]
    assert len(reads) == 3 and sum(any(i.startswith("^") for i in n.input) for n in reads) == 2
    np.testing.assert_allclose(g(x)[0].numpy() if isinstance(g(x), (list, tuple)) else g(x).numpy(),
                               f(x).numpy(), rtol=1e-5)


@pytest.mark.slow
def test_local_cluster_reads_follow_priority_order(tmp_path):
    out = tmp_path / "runs.json"
    proc = subprocess.run([sys.executable, "examples/tf_cluster_example.py", "--compare", "--steps", "3",
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=360,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plain, fwd, rev = json.loads(out.read_text())
    assert not plain["hook"] and plain["edges"] == 0
    for run in (fwd, rev):
        assert run["edges"] == len(run["order"]) - 1
        for observed in run["read_orders"]:  # the ps's trace shows the enforced order every step
            assert observed == run["order"]
        spans = run["last_spans"]  # window 1: each read starts after the previous one ended
        for a, b in zip(run["order"], run["order"][1:]):
            assert spans[b][0] >= spans[a][1]
    assert fwd["order"] == rev["order"][::-1]
    # enforcing an order changes nothing in the results
    for run in (fwd, rev):
        np.testing.assert_allclose(run["losses"], plain["losses"], rtol=1e-6)
        for n in plain["final"]:
            np.testing.assert_allclose(run["final"][n], plain["final"][n], rtol=1e-6, atol=1e-7)
    assert plain["losses"][0] != plain["losses"][-1]
