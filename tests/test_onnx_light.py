"""ONNX models whose weights are computed by constants (issue 31, item 4).

ONNX's own backend test models come in a "light" form: the real topology, every
weight produced by ``ConstantOfShape`` from a ``Constant`` shape instead of
stored as an initializer. Such a weight is a parameter all the same: imported
with its size and transferred like one, so the figures describe the network,
not a network without parameters. These build their own light models: the
example ResNet-50 export with its initializers turned into ``ConstantOfShape``,
and an AlexNet written with ``onnx.helper`` alone.
"""
from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from dlsched.errors import ImportFailure
from dlsched.importers.onnx_importer import import_onnx
from tests.conftest import assert_clean_error, run_cli

ALEXNET_PARAMS = 61_100_840  # torch's AlexNet with 1,000 classes, examples/torch_models.py


def _fill(name: str, dims, shape_name: str | None = None) -> list:
    """``Constant(dims) → ConstantOfShape`` producing the float tensor ``name``: a light model's weight."""
    shape_name = shape_name or f"{name}__shape"
    return [helper.make_node("Constant", [], [shape_name],
                             value=helper.make_tensor(f"{shape_name}_v", TensorProto.INT64, [len(dims)], list(dims))),
            helper.make_node("ConstantOfShape", [shape_name], [name],
                             value=helper.make_tensor(f"{name}_v", TensorProto.FLOAT, [1], [0.01]))]


def _light(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every floating-point initializer built by ``ConstantOfShape`` instead."""
    g = model.graph
    weights = [t for t in g.initializer if t.data_type == TensorProto.FLOAT]
    names = {t.name for t in weights}
    fills = [n for t in weights for n in _fill(t.name, t.dims)]
    rest = [t for t in g.initializer if t.name not in names]
    inputs = [i for i in g.input if i.name not in names]
    graph = helper.make_graph(fills + list(g.node), g.name, inputs, list(g.output), rest)
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _alexnet_light(batch: int = 2) -> onnx.ModelProto:
    nodes, x = [], "images"

    def conv(i, cin, cout, k, stride, pad):
        nonlocal x
        nodes.extend(_fill(f"conv{i}.weight", [cout, cin, k, k]) + _fill(f"conv{i}.bias", [cout]))
        nodes.append(helper.make_node("Conv", [x, f"conv{i}.weight", f"conv{i}.bias"], [f"c{i}"],
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x = f"r{i}"

    def pool(i):
        nonlocal x
        nodes.append(helper.make_node("MaxPool", [x], [f"p{i}"], kernel_shape=[3, 3], strides=[2, 2]))
        x = f"p{i}"

    conv(1, 3, 64, 11, 4, 2), pool(1), conv(2, 64, 192, 5, 1, 2), pool(2)
    conv(3, 192, 384, 3, 1, 1), conv(4, 384, 256, 3, 1, 1), conv(5, 256, 256, 3, 1, 1), pool(5)
    nodes.append(helper.make_node("Flatten", [x], ["flat"]))
    x = "flat"
    for i, (cin, cout) in zip((6, 7, 8), ((256 * 6 * 6, 4096), (4096, 4096), (4096, 1000))):
        nodes.extend(_fill(f"fc{i}.weight", [cout, cin]) + _fill(f"fc{i}.bias", [cout]))
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [f"g{i}"], transB=1))
        x = f"g{i}"
    graph = helper.make_graph(nodes, "alexnet_light",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, 224, 224])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_light_resnet50_has_the_parameters_of_the_stored_one(onnx_resnet50, tmp_path, mode):
    stored = import_onnx(onnx_resnet50, mode=mode)
    path = tmp_path / "resnet50_light.onnx"
    onnx.save(_light(onnx.load(str(onnx_resnet50))), str(path))
    light = import_onnx(path, mode=mode)
    assert light.param_count == stored.param_count == 25_557_032
    assert sorted(r.name for r in light.recvs()) == sorted(r.name for r in stored.recvs())
    assert len(light.compute_ops()) == len(stored.compute_ops())  # the weights' builders are no ops
    assert len(light.sends()) == len(stored.sends())


def test_light_alexnet_through_the_cli(tmp_path):
    path = tmp_path / "alexnet_light.onnx"
    onnx.save(_alexnet_light(), str(path))
    proc = run_cli("inspect", path, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["param_count"] == ALEXNET_PARAMS and summary["recv_ops"] == 16
    oracle = tmp_path / "o.csv"
    assert run_cli("profile", path, "-o", oracle, "--runs", "1").returncode == 0
    assert run_cli("order", path, "--algo", "tac", "--oracle", oracle, "-o", tmp_path / "p.json").returncode == 0


def _matmul_model(path, weight_nodes) -> None:
    graph = helper.make_graph(weight_nodes + [helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ex", 1)])
    onnx.save(model, str(path))


def test_a_random_fill_is_a_weight_and_an_unsized_one_is_refused(tmp_path):
    """A weight drawn by ``RandomNormal`` is sized by its attribute; one whose shape nothing can tell (made by an
    op ONNX cannot infer) exits 2 saying why, instead of answering for a model without it."""
    path = tmp_path / "m.onnx"
    _matmul_model(path, [helper.make_node("RandomNormal", [], ["w"], shape=[4, 4])])
    assert import_onnx(path).param_count == 16
    _matmul_model(path, [helper.make_node("MakeShape", [], ["s"], domain="ex"),
                         helper.make_node("ConstantOfShape", ["s"], ["w"])])
    with pytest.raises(ImportFailure, match="computed from constants"):
        import_onnx(path)
    assert_clean_error(run_cli("inspect", path), "computed from constants", "cannot be told")
