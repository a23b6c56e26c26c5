"""Shape arithmetic ONNX's data propagation skips is evaluated on import (``dlsched.importers.onnx_fold``).

The graph is the pattern the torch exporter writes for Hugging Face BERT's
``token_type_ids.expand(batch, length)``: the target shape goes through
``ConstantOfShape``, ``Equal`` and ``Where``, so ``onnx.shape_inference``
leaves the ``Expand``, the embedding ``Gather`` after it and their gradients
with an unknown size, and the analytic oracle could not cost them.
"""
from __future__ import annotations

import pytest


def _bert_token_types(path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name, values):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, np.int64)))

    nodes = [
        const("b", [2]), const("l", [16]), const("minus_one", [-1]), const("two", [2]),
        helper.make_node("Concat", ["b", "l"], ["bl"], axis=0),
        helper.make_node("Reshape", ["bl", "two"], ["shape"]),
        helper.make_node("Shape", ["shape"], ["n"]),
        helper.make_node("ConstantOfShape", ["n"], ["ones"], value=helper.make_tensor("o", TensorProto.INT64, [1],
                                                                                     [1])),
        helper.make_node("Mul", ["ones", "minus_one"], ["neg"]),
        helper.make_node("Equal", ["shape", "neg"], ["is_neg"]),
        helper.make_node("Where", ["is_neg", "ones", "shape"], ["target"]),
        helper.make_node("Expand", ["buffered", "target"], ["token_types"]),
        helper.make_node("Gather", ["type_table", "token_types"], ["type_embeds"]),
        helper.make_node("Gather", ["word_table", "input_ids"], ["word_embeds"]),
        helper.make_node("Add", ["word_embeds", "type_embeds"], ["embeds"]),
    ]
    inits = [numpy_helper.from_array(np.zeros((1, 16), np.int64), "buffered"),
             numpy_helper.from_array(np.ones((2, 8), np.float32), "type_table"),
             numpy_helper.from_array(np.ones((100, 8), np.float32), "word_table")]
    graph = helper.make_graph(nodes, "bert_token_types",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, 16])],
                              [helper.make_tensor_value_info("embeds", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_expand_through_where_gets_its_shape_and_a_cost(tmp_path, mode):
    from dlsched.importers.onnx_importer import import_onnx
    from dlsched.profiling.analytic import analytic_oracle
    from dlsched.profiling.device_specs import BUILTIN

    g = import_onnx(_bert_token_types(tmp_path / "m.onnx"), mode=mode)
    assert g.op("Expand_11").output_shapes == [[2, 16]]
    assert g.op("Gather_12").output_shapes == [[2, 16, 8]]
    _, untimed = analytic_oracle(g, BUILTIN["cpu"])
    assert untimed == {}
    # The ops of the original file stay ops of the graph: folding only informs the shapes.
    assert sum(op.op_type == "Where" for op in g.compute_ops()) == 1


def test_a_symbolic_batch_stays_unknown(tmp_path):
    # Folding evaluates constants only: a Shape of a tensor with a symbolic dimension is not folded.
    import onnx

    from dlsched.importers.onnx_importer import import_onnx

    path = _bert_token_types(tmp_path / "m.onnx")
    m = onnx.load(path)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(m, path)
    g = import_onnx(path)
    assert g.op("Gather_13").output_shapes == [[None, 16, 8]]
    assert import_onnx(path, batch=3).op("Gather_13").output_shapes == [[3, 16, 8]]
