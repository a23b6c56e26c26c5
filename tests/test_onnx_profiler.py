"""onnxruntime per-node profiler: coverage, statistics, sanity against plain runs."""
from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest

from dlsched.errors import DlschedError
from dlsched.importers.onnx_importer import import_onnx
from dlsched.profiling.onnx_profiler import profile_onnx
from dlsched.formats.oracle_file import COLUMNS


def _plain_wall(path, feeds, runs=5):
    """Shortest wall time of ``runs`` session.run calls, same configuration (one intra-op thread, as the
    profiler's default) but no profiling: the minimum, as the per-op times it is set against (a CI machine at
    twice its usual pace ran the median at 2.08 s beside 0.90 s of per-op minima, a ratio of 0.43)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        walls.append(time.perf_counter() - t0)
    return min(walls)


@pytest.mark.slow
def test_resnet50_cpu_profile(onnx_resnet50):
    g = import_onnx(onnx_resnet50, batch=8)
    calls = []
    df, missing = profile_onnx(onnx_resnet50, g, device="cpu", runs=5, progress=lambda d, t: calls.append((d, t)))
    assert list(df.columns) == list(COLUMNS)
    assert calls == [(i, 6) for i in range(1, 7)]
    ops = [op.name for op in g.compute_ops()]
    assert set(df.op) | set(missing) == set(ops) and not set(df.op) & set(missing)
    assert list(df.op) == [o for o in ops if o in set(df.op)]  # canonical order
    assert len(df) == len(ops), missing  # ORT reports every ResNet-50 node
    assert (df.runs == 5).all() and (df.time > 0).all() and (df.time <= df["median"]).all()
    assert (df.source == "profiled").all() and (df.resource == "compute:0").all()
    assert df.set_index("op").loc["/conv1/Conv", "op_type"] == "Conv"

    feeds = {"input": np.random.default_rng(0).standard_normal((8, 3, 224, 224)).astype(np.float32)}
    wall = _plain_wall(onnx_resnet50, feeds)
    ratio = df.time.sum() / wall
    print(f"\nResNet-50 b=8: sum of per-op minima {df.time.sum() * 1e3:.1f} ms, "
          f"plain shortest wall {wall * 1e3:.1f} ms, ratio {ratio:.2f}")
    assert 0.6 <= ratio <= 1.6


def test_training_rows_are_mirrored(onnx_transformer):
    g = import_onnx(onnx_transformer, batch=2, mode="training")
    df, missing = profile_onnx(onnx_transformer, g, runs=3, warmup=1)
    assert not missing
    t = df.set_index("op")
    assert len(t) == len(g.compute_ops())
    fwd = [op for op in g.compute_ops() if op.phase == "forward"]
    for op in fwd:
        row, back = t.loc[op.name], t.loc[f"{op.name}/grad"]
        assert back.time == pytest.approx(2 * row.time) and back["median"] == pytest.approx(2 * row["median"])
        assert back.source == "analytic" and back.op_type == f"{op.op_type}Grad"
    prof = t[t.source == "profiled"]
    assert len(prof) > 200 and (prof.runs == 3).all() and (prof.time > 0).all()
    # Constant nodes do no work per run: analytic zero, not missing
    consts = [op.name for op in fwd if op.op_type == "Constant"]
    assert consts and (t.loc[consts, "time"] == 0).all() and (t.loc[consts, "source"] == "analytic").all()


def test_unknown_op_is_named_not_invented(onnx_small_cnn):
    g = import_onnx(onnx_small_cnn, batch=4)
    from dlsched.dag import COMPUTE

    g.add_op("not_in_file", COMPUTE, op_type="Relu")
    df, missing = profile_onnx(onnx_small_cnn, g, runs=2)
    assert "not_in_file" in missing and "small_cnn.onnx" in missing["not_in_file"]
    assert "not_in_file" not in set(df.op) and len(df) == len(g.compute_ops()) - 1


def test_bad_device(onnx_small_cnn):
    g = import_onnx(onnx_small_cnn)
    with pytest.raises(DlschedError, match="unknown device"):
        profile_onnx(onnx_small_cnn, g, device="tpu")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(DlschedError, match="CUDAExecutionProvider"):
            profile_onnx(onnx_small_cnn, g, device="cuda")


def test_fixed_batch_model_profiled_at_new_batch(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], initializer=[w])
    path = tmp_path / "mm.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    graph = import_onnx(path, batch=64)
    df, missing = profile_onnx(path, graph, runs=2)
    assert not missing and list(df.op) == ["MatMul_0"]  # the synthesised name maps to ORT's node
