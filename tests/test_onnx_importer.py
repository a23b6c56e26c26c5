"""ONNX importer: parameter totals against torch, DAG structure, options, bad files."""
from __future__ import annotations

import json

import networkx as nx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlsched.dag import COMPUTE
from dlsched.errors import ImportFailure
from dlsched.importers.onnx_importer import import_onnx, node_names
from tests.conftest import assert_clean_error, run_cli


def _torch_totals(factory):
    from examples import torch_models

    module, _ = getattr(torch_models, factory)(batch=1)
    params = dict(module.named_parameters())
    buffers = {n: b for n, b in module.named_buffers() if b.is_floating_point()}
    return params, buffers


def _write(model, path):
    """Save without running the checker (tests build deliberately broken graphs)."""
    path.write_bytes(model.SerializeToString())
    return path


def _tiny(path, *, fixed_batch=None, shared=False):
    """x[B,4] → MatMul(W) → Reshape(shape: int64 initializer) → MatMul(W again if shared) → y."""
    b = fixed_batch if fixed_batch else "N"
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    w2 = numpy_helper.from_array(np.ones((4, 4), np.float32), "W2")
    unused = numpy_helper.from_array(np.ones((3,), np.float32), "unused")
    shape = numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),          # unnamed → MatMul_0
        helper.make_node("Reshape", ["h", "shape"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "W" if shared else "W2"], ["y"], name="reshape"),  # duplicate name
    ]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, 4])],
                          initializer=[w, w2, unused, shape])
    return _write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


# -- parameter totals against torch -------------------------------------------------

@pytest.mark.slow
def test_resnet50_totals_equal_torch(onnx_resnet50):
    params, buffers = _torch_totals("resnet50")
    g = import_onnx(onnx_resnet50)
    assert {r.name for r in g.recvs()} == set(params)
    assert g.param_count == sum(p.numel() for p in params.values()) == 25_557_032
    assert g.param_bytes == 4 * 25_557_032
    for r in g.recvs():
        assert r.shape == list(params[r.name].shape) and r.dtypes == ["float32"]
    gb = import_onnx(onnx_resnet50, buffers=True)
    assert {r.name for r in gb.recvs()} == set(params) | set(buffers)
    assert gb.param_count == g.param_count + sum(b.numel() for b in buffers.values())


@pytest.mark.slow
def test_vgg16_totals_through_cli(onnx_vgg16):
    params, _ = _torch_totals("vgg16")
    proc = run_cli("inspect", onnx_vgg16, "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["param_count"] == sum(p.numel() for p in params.values()) == 138_357_544
    assert s["recv_ops"] == len(params) == 32
    assert s["param_bytes"] == 4 * 138_357_544
    assert round(s["param_bytes"] / 2**20, 1) == 527.8


def test_buffers_flag_through_cli(onnx_resnet50):
    _, buffers = _torch_totals("resnet50")
    plain = json.loads(run_cli("inspect", onnx_resnet50, "--json").stdout)
    proc = run_cli("inspect", onnx_resnet50, "--json", "--buffers")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["recv_ops"] == plain["recv_ops"] + len(buffers) == 161 + 106
    assert s["param_count"] == plain["param_count"] + sum(b.numel() for b in buffers.values())


# -- structure -----------------------------------------------------------------------

def test_inference_structure(onnx_resnet50):
    g = import_onnx(onnx_resnet50, batch=2)
    model = onnx.load(str(onnx_resnet50), load_external_data=False)
    recvs = {r.name for r in g.recvs()}
    assert all(g.nx.in_degree(r) == 0 for r in recvs)
    names = node_names(list(model.graph.node))
    assert [op.name for op in g.compute_ops()] == names  # file order, canonical after the recvs
    assert [op.index for op in g.ops()] == list(range(len(g)))
    for node, name in zip(model.graph.node, names):
        for x in node.input:
            if x in recvs:
                assert g.nx.has_edge(x, name)
    conv = g.op("/conv1/Conv")
    assert conv.op_type == "Conv" and conv.attrs["kernel_shape"] == [7, 7] and conv.attrs["strides"] == [2, 2]
    assert conv.output_shapes == [[2, 64, 112, 112]] and conv.input_shapes[0] == [2, 3, 224, 224]
    assert g.source == {"format": "onnx", "path": str(onnx_resnet50), "batch": 2} and g.name == "resnet50"


def test_training_structure(onnx_resnet50):
    g = import_onnx(onnx_resnet50, mode="training")
    fwd = [op for op in g.compute_ops() if op.phase == "forward"]
    bwd = [op for op in g.compute_ops() if op.phase == "backward"]
    assert len(bwd) == len(fwd) and all(g.nx.has_edge(f.name, f"{f.name}/grad") for f in fwd)
    assert g.op("/conv1/Conv/grad").op_type == "ConvGrad"
    sends = g.sends()
    assert [s.param for s in sends] == [r.name for r in g.recvs()]
    for s in sends:
        assert g.nx.out_degree(s.name) == 0
        for user in g.successors(s.param):
            assert nx.has_path(g.nx, user, s.name)
    assert max(op.index for op in fwd) < min(op.index for op in bwd) < min(s.index for s in sends)
    assert nx.is_directed_acyclic_graph(g.nx)


def test_tiny_model_rules(tmp_path):
    g = import_onnx(_tiny(tmp_path / "tiny.onnx"))
    # integer initializer "shape" and the unconsumed "unused" are not transfers
    assert [r.name for r in g.recvs()] == ["W", "W2"]
    assert [op.name for op in g.compute_ops()] == ["MatMul_0", "reshape", "reshape_2"]
    assert sorted(g.edges()) == sorted([("W", "MatMul_0"), ("W2", "reshape_2"),
                                        ("MatMul_0", "reshape"), ("reshape", "reshape_2")])
    assert g.op("reshape_2").output_shapes == [[None, 4]]


def test_shared_parameter_accumulates_gradients(tmp_path):
    g = import_onnx(_tiny(tmp_path / "shared.onnx", shared=True), mode="training")
    acc = g.op("W/grad_accum")
    assert acc.op_type == "Sum" and acc.phase == "backward"
    assert set(g.predecessors("W/grad_accum")) == {"MatMul_0/grad", "reshape_2/grad"}
    assert list(g.predecessors("W/grad")) == ["W/grad_accum"]
    assert g.nx.has_edge("reshape_2/grad", "reshape/grad") and g.nx.has_edge("reshape/grad", "MatMul_0/grad")


def test_batch_overrides_fixed_and_symbolic(tmp_path):
    fixed = _tiny(tmp_path / "fixed.onnx", fixed_batch=2)
    assert import_onnx(fixed).op("MatMul_0").output_shapes == [[2, 4]]
    assert import_onnx(fixed, batch=7).op("MatMul_0").output_shapes == [[7, 4]]
    sym = _tiny(tmp_path / "sym.onnx")
    assert import_onnx(sym).op("MatMul_0").output_shapes == [[None, 4]]
    assert import_onnx(sym, batch=5).op("reshape_2").output_shapes == [[5, 4]]


def test_batch_and_round_trip_through_cli(onnx_small_cnn, tmp_path):
    a, b, again = tmp_path / "a.dag.json", tmp_path / "b.dag.json", tmp_path / "again.dag.json"
    for out, batch in ((a, "3"), (b, "5")):
        proc = run_cli("inspect", onnx_small_cnn, "--batch", batch, "--mode", "training", "--save", out, "--json")
        assert proc.returncode == 0, proc.stderr
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    conv_a = next(o for o in da["ops"] if o["op_type"] == "Conv")
    conv_b = next(o for o in db["ops"] if o["op_type"] == "Conv")
    assert conv_a["output_shapes"] == [[3, 32, 32, 32]] and conv_b["output_shapes"] == [[5, 32, 32, 32]]
    assert da["fingerprint"] == db["fingerprint"]  # same model, another batch
    proc = run_cli("inspect", a, "--save", again, "--json")
    assert proc.returncode == 0, proc.stderr
    assert again.read_text() == a.read_text()


# -- bad input -------------------------------------------------------------------------

def test_truncated_file_clean_error(onnx_small_cnn, tmp_path):
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(onnx_small_cnn.read_bytes()[:5000])
    assert_clean_error(run_cli("inspect", bad), "truncated.onnx", "onnx")
    with pytest.raises(ImportFailure, match="truncated.onnx"):
        import_onnx(bad)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert_clean_error(run_cli("inspect", empty), "empty.onnx", "no graph nodes")


def test_cycle_clean_error(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second")]
    g = helper.make_graph(nodes, "cyclic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    path = _write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "cyclic.onnx")
    assert_clean_error(run_cli("inspect", path), "cyclic.onnx", "cycle")


def test_missing_file_clean_error(tmp_path):
    assert_clean_error(run_cli("inspect", tmp_path / "absent.onnx"), "absent.onnx")


def test_subgraph_outer_scope_dependency(tmp_path):
    w = numpy_helper.from_array(np.ones((2,), np.float32), "w")
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Relu", ["inp"], ["x"], name="relu"),
             helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "iff", [helper.make_tensor_value_info("inp", TensorProto.FLOAT, [2]),
                                         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], initializer=[w])
    graph = import_onnx(_write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                               tmp_path / "iff.onnx"))
    assert [r.name for r in graph.recvs()] == ["w"]
    assert set(graph.predecessors("branch")) == {"w", "relu"}
    assert all(op.kind != COMPUTE or op.name in ("relu", "branch") for op in graph.ops())


@pytest.mark.parametrize("folding", [True, False])
def test_anonymous_transfers_from_constant_folding_are_named_in_a_warning(tmp_path, folding):
    """torch's exporter folds a 3-D Linear's transposed weight into a new initializer
    ``onnx::MatMul_N``; the import still works, and says the names were lost."""
    import warnings

    import torch
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    path = tmp_path / "mlp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(mlp, (torch.randn(2, 3, 4),), str(path), dynamo=False, do_constant_folding=folding)
    proc = run_cli("inspect", str(path), "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recv_ops"] == 4  # stdout stays one JSON object
    if folding:
        assert "warning:" in proc.stderr and "onnx::MatMul_" in proc.stderr and "do_constant_folding=False" \
            in proc.stderr, proc.stderr
    else:
        assert "warning" not in proc.stderr, proc.stderr
