"""TensorFlow profiler (DESIGN §3): per-op minima from full-trace step stats, fused kernels split.

Every test here is marked ``tf_onednn``: ``tests/test_tf_onednn.py`` runs them
with ``TF_ENABLE_ONEDNN_OPTS=0`` and ``=1`` in subprocesses, since which nodes
TensorFlow fuses into one kernel depends on that setting.
"""
from __future__ import annotations

import os
import statistics

import pytest

from dlsched.errors import DlschedError

pytestmark = pytest.mark.tf_onednn
ATTEMPTS = 3  # the machine is shared: a ratio outside the band is re-measured before it counts
ONEDNN = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")


def _check_fused(df, graph):
    """Fused ops have a 0 row and a "fused into X" reason; X is a timed op of the same group."""
    fused = df.attrs["fused"]
    times = df.set_index("op")["time"]
    for op, why in fused.items():
        into = why.split()[2].rstrip(":")
        assert why.startswith(f"fused into {into}: TensorFlow ran "), why
        assert times[op] == 0 and times[into] > 0 and into not in fused, (op, why)
    timed = df[~df["op"].isin(list(fused))]
    assert (timed["time"] > 0).all() and (df["time"] <= df["median"]).all()
    return fused


@pytest.mark.slow
def test_resnet50_inference_cpu(keras_resnet50):
    from dlsched.importers.tf_importer import import_graphdef
    from dlsched.profiling.tf_profiler import profile_tf

    path = keras_resnet50["graphdef"]
    graph = import_graphdef(path, batch=8)
    compute = [op.name for op in graph.compute_ops()]
    ratios = []
    for attempt in range(ATTEMPTS):
        calls = []
        df, missing = profile_tf(path, graph, device="cpu", runs=5, warmup=1,
                                 progress=lambda d, t: calls.append((d, t)), plain_runs=5)
        assert calls == [(i, 6) for i in range(1, 7)]
        assert list(df.columns) == ["op", "time", "runs", "median", "op_type", "resource", "source"]
        # Every compute op has a row, fused ones included, and none is left untimed.
        assert missing == {} and "x" not in graph  # the fed input is not an op
        assert list(df["op"]) == compute  # canonical order
        assert (df["runs"] == 5).all()
        assert (df["source"] == "profiled").all() and (df["resource"] == "compute:0").all()
        assert not df["op"].isin([r.name for r in graph.recvs()]).any()
        fused = _check_fused(df, graph)
        convs = df[df["op_type"] == "Conv2D"]
        # The fused kernel's time is on the convolution, never on the BiasAdd that names it.
        assert len(convs) == 53 and (convs["time"] > 0).all() and not set(convs["op"]) & set(fused)
        assert convs["time"].sum() > 0.3 * df["time"].sum()
        # Sanity: the per-op minima add up to about one plain, untraced run of the same session.
        plain = df.attrs["plain_wall"]
        assert len(plain) == 5
        total = float(df["time"].sum())
        ratio, ratio_fastest = total / statistics.median(plain), total / min(plain)
        # Other jobs on this 2-core machine inflate some plain runs far more than the per-op minima,
        # which are taken at quiet moments. Plain runs spread by more than a quarter show that; then the
        # fastest plain run is the comparable figure (the torch test falls back the same way).
        contended = statistics.median(plain) > 1.25 * min(plain)
        checked = ratio_fastest if contended else ratio
        ratios.append({"checked": round(checked, 3), "median": round(ratio, 3), "fastest": round(ratio_fastest, 3),
                       "contended": contended})
        print(f"\nResNet50 b8 CPU, TF_ENABLE_ONEDNN_OPTS={ONEDNN}: sum of per-op minima {total:.3f} s, "
              f"plain runs {[round(t, 3) for t in plain]} s; ratio to the median plain run {ratio:.2f}, "
              f"to the fastest {ratio_fastest:.2f}{' (contended)' if contended else ''}; {len(fused)} ops fused "
              f"({sorted({why.split(' as one ')[1].split()[0] for why in fused.values()})})")
        if 0.6 <= checked <= 1.3:
            return
    pytest.fail(f"sum of per-op minima / plain run outside [0.6, 1.3] in {ATTEMPTS} attempts: {ratios}")


def test_fused_kernel_time_is_split_not_lost(keras_resnet50):
    """On one real traced step: the per-op times add up to the kernels' times, group by group,
    and cover the step (one inter-op thread: kernels run one after another)."""
    from dlsched.importers.tf_importer import import_graphdef
    from dlsched.profiling.tf_fusion import find_fusions, split_fused
    from dlsched.profiling.tf_profiler import TFSession, node_times

    path = keras_resnet50["graphdef"]
    graph = import_graphdef(path, batch=2)
    sess = TFSession(path, graph)
    try:
        sess.run()
        meta = sess.run(trace=True)
    finally:
        sess.close()
    kernel_ops: dict = {}
    kernels = node_times(meta, kernel_ops)
    per_op, fused = split_fused(graph, {k: [t] for k, t in kernels.items()}, kernel_ops)
    compute = {op.name for op in graph.compute_ops()}
    assert compute <= set(per_op)  # nothing left without a time
    ran = [n for n in kernels if n in compute]
    total = sum(per_op[n][0] for n in compute)
    assert total == pytest.approx(sum(kernels[n] for n in ran), rel=1e-12)
    stats = [ns for dev in meta.step_stats.dev_stats for ns in dev.node_stats]
    span = (max(ns.all_start_micros + ns.all_end_rel_micros for ns in stats) - min(ns.all_start_micros for ns in stats))
    print(f"\nResNet50 b2, TF_ENABLE_ONEDNN_OPTS={ONEDNN}: per-op times cover {total / (span * 1e-6):.2f} of the "
          f"traced step ({len(fused)} ops fused)")
    assert total >= 0.85 * span * 1e-6
    fusions = find_fusions(graph, kernel_ops, ran)
    assert {m for f in fusions for m in f.members if m != f.work} == set(fused)
    for f in fusions:
        assert sum(per_op[m][0] for m in f.members) == pytest.approx(kernels[f.kernel])
        assert graph.op(f.work).op_type == "Conv2D" or graph.op(f.work).op_type == "MatMul", f
        assert f.kernel in f.members and f.kernel_op == kernel_ops[f.kernel]


def test_tf1_training_profile(tf1_graphs):
    from dlsched.importers.tf_importer import import_graphdef
    from dlsched.profiling.tf_profiler import profile_tf

    path = tf1_graphs["graphdef"]
    graph = import_graphdef(path, mode="training", batch=16)
    df, missing = profile_tf(path, graph, runs=3, warmup=1)
    assert (df["runs"] == 3).all()
    fused = _check_fused(df, graph)
    timed = set(df["op"]) - set(fused)
    # Every gradient producer that feeds a send was timed.
    for send in graph.sends():
        assert next(iter(graph.predecessors(send.name))) in timed
    assert any(graph.op(n).phase == "backward" for n in timed)
    # Both forward matmuls hold their fused kernel's time (MatMul + BiasAdd (+ Relu) when fused).
    assert {"MatMul", "MatMul_1"} <= timed
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
    _check_fused(df, graph)


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
        _check_fused(df, graph)
    else:
        with pytest.raises(DlschedError, match="no GPU"):
            profile_tf(tf1_graphs["graphdef"], graph, device="cuda")


@pytest.mark.slow
def test_efficientnetb0_training_times_every_op(keras_efficientnetb0):
    """Keras EfficientNetB0 as a SavedModel (tf.saved_model.save), in training (issue 31, item 6): oneDNN runs each
    squeeze-and-excitation convolution's BiasAddGrad inside the filter gradient's kernel, so every op has a
    time or a 0 with its reason, and the per-op minima add up to a plain step."""
    from dlsched.importers.tf_importer import import_saved_model
    from dlsched.profiling.tf_profiler import profile_tf

    path = keras_efficientnetb0["savedmodel"]
    graph = import_saved_model(path, mode="training", batch=2)
    ratios = []
    for attempt in range(ATTEMPTS):
        df, missing = profile_tf(path, graph, runs=5, warmup=1, plain_runs=5)
        assert missing == {}, list(missing.items())[:3]
        assert len(df) == len(graph.compute_ops())
        fused = _check_fused(df, graph)
        bias_grads = [op.name for op in graph.compute_ops() if op.op_type == "BiasAddGrad"]
        assert all(name in fused or df.set_index("op").loc[name, "time"] > 0 for name in bias_grads)
        plain = df.attrs["plain_wall"]
        total = float(df["time"].sum())
        contended = statistics.median(plain) > 1.25 * min(plain)
        checked = total / (min(plain) if contended else statistics.median(plain))
        ratios.append(round(checked, 3))
        print(f"\nEfficientNetB0 training b2, TF_ENABLE_ONEDNN_OPTS={ONEDNN}: sum of per-op minima {total:.3f} s, "
              f"plain runs {[round(t, 3) for t in plain]} s; ratio {checked:.2f}; {len(fused)} ops fused")
        if 0.6 <= checked <= 1.3:
            return
    pytest.fail(f"sum of per-op minima / plain step outside [0.6, 1.3] in {ATTEMPTS} attempts: {ratios}")
