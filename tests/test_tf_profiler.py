"""TensorFlow profiler (DESIGN §3): per-op minima from full-trace step stats."""
from __future__ import annotations

import statistics

import pytest

from dlsched.errors import DlschedError


@pytest.mark.slow
def test_resnet50_inference_cpu(keras_resnet50):
    from dlsched.importers.tf_importer import import_graphdef
    from dlsched.profiling.tf_profiler import profile_tf

    path = keras_resnet50["graphdef"]
    graph = import_graphdef(path, batch=8)
    calls = []
    df, missing = profile_tf(path, graph, device="cpu", runs=5, warmup=1,
                             progress=lambda d, t: calls.append((d, t)), plain_runs=5)
    assert calls == [(i, 6) for i in range(1, 7)]
    assert list(df.columns) == ["op", "time", "runs", "median", "op_type", "resource", "source"]
    compute = [op.name for op in graph.compute_ops()]
    assert set(df["op"]) | set(missing) == set(compute) and not set(df["op"]) & set(missing)
    assert missing == {} and "x" not in graph  # the fed input is not an op
    assert list(df["op"]) == compute  # canonical order
    assert (df["runs"] == 5).all() and (df["time"] > 0).all() and (df["time"] <= df["median"]).all()
    assert (df["source"] == "profiled").all() and (df["resource"] == "compute:0").all()
    assert not df["op"].isin([r.name for r in graph.recvs()]).any()
    convs = df[df["op_type"] == "Conv2D"]
    assert len(convs) == 53 and convs["time"].sum() > 0.3 * df["time"].sum()
    # Sanity: the per-op minima add up to about one plain, untraced run of the same session.
    wall = statistics.median(df.attrs["plain_wall"])
    ratio = df["time"].sum() / wall
    print(f"\nResNet50 b8 CPU: sum of per-op minima {df['time'].sum():.3f} s, median plain run {wall:.3f} s, "
          f"ratio {ratio:.2f}")
    assert len(df.attrs["plain_wall"]) == 5
    assert 0.6 <= ratio <= 1.6, ratio


def test_tf1_training_profile(tf1_graphs):
    from dlsched.importers.tf_importer import import_graphdef
    from dlsched.profiling.tf_profiler import profile_tf

    path = tf1_graphs["graphdef"]
    graph = import_graphdef(path, mode="training", batch=16)
    df, missing = profile_tf(path, graph, runs=3, warmup=1)
    assert (df["runs"] == 3).all() and (df["time"] > 0).all()
    timed = set(df["op"])
    # Every gradient producer that feeds a send was timed.
    for send in graph.sends():
        assert next(iter(graph.predecessors(send.name))) in timed
    assert any(graph.op(n).phase == "backward" for n in timed)
    # Only what the loss and the parameter gradients need is in the DAG, and all of it runs.
    assert missing == {}
    assert "gradients/MatMul_grad/MatMul" not in graph  # x's own gradient: pruned, never runs


def test_frozen_graph_profile(tf1_graphs):
    """Profiling a frozen graph: Const recvs get no row, compute ops do."""
    from dlsched.importers.tf_importer import import_graphdef
    from dlsched.profiling.tf_profiler import profile_tf

    path = tf1_graphs["frozen"]
    graph = import_graphdef(path, batch=2)
    df, missing = profile_tf(path, graph, runs=2, warmup=0)
    assert set(df["op"]) == {op.name for op in graph.compute_ops()}
    assert not missing


def test_bad_device_and_runs(tf1_graphs):
    import tensorflow as tf

    from dlsched.importers.tf_importer import import_graphdef
    from dlsched.profiling.tf_profiler import profile_tf

    graph = import_graphdef(tf1_graphs["graphdef"])
    with pytest.raises(DlschedError, match="runs"):
        profile_tf(tf1_graphs["graphdef"], graph, runs=0)
    with pytest.raises(DlschedError, match="unknown device"):
        profile_tf(tf1_graphs["graphdef"], graph, device="tpu")
    if tf.config.list_physical_devices("GPU"):
        df, _ = profile_tf(tf1_graphs["graphdef"], graph, device="cuda", runs=2)
        assert (df["time"] > 0).all()
    else:
        with pytest.raises(DlschedError, match="no GPU"):
            profile_tf(tf1_graphs["graphdef"], graph, device="cuda")
