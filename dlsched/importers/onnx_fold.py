"""Shape arithmetic an ONNX export computes from constants, evaluated so that shape inference can use it.

``onnx.shape_inference`` propagates values through ``Shape``, ``Gather``,
``Concat``, ``Unsqueeze``… but not through ``ConstantOfShape``, ``Equal`` or
``Where``, which the torch exporter emits for ``tensor.expand(batch, length)``
(Hugging Face BERT's token-type ids). The ``Expand`` then has an output of
unknown size, and so does everything downstream of it, although every input of
that arithmetic is a constant. :func:`fold_shape_arithmetic` evaluates such
nodes (integer or boolean outputs, every input a constant or the shape of a
tensor whose shape is known) with ``onnx.reference`` and replaces them by
initializers; a second inference then knows those shapes.
"""
from __future__ import annotations

# Element types that hold shape arithmetic (no data a model computes on): int8…int64, uint8…uint64, bool.
_INTEGER_TYPES = {2, 3, 4, 5, 6, 7, 9, 12, 13}
_LIMIT = 4096  # elements: larger integer tensors are data (token ids), not shapes
_NOT_FOLDED = {"Multinomial", "If", "Loop", "Scan"}  # random, or holding subgraphs


def fold_shape_arithmetic(model, inferred) -> int:
    """Replace the constant integer nodes of ``model`` (a light copy, edited in place) by initializers.

    Parameters
    ----------
    model : onnx.ModelProto
        The model whose nodes are folded; its graph loses them and gains
        initializers with their values.
    inferred : onnx.ModelProto
        ``model`` after shape inference: the output types and known shapes.

    Returns
    -------
    int
        How many nodes were folded (0: nothing changed).

    Examples
    --------
    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> nodes = [helper.make_node("Constant", [], ["s"], value=helper.make_tensor("v", TensorProto.INT64, [2], [2, 3])),
    ...          helper.make_node("ConstantOfShape", ["s"], ["z"], value=helper.make_tensor("o", TensorProto.INT64,
    ...                                                                                     [1], [1])),
    ...          helper.make_node("Equal", ["s", "s"], ["e"]), helper.make_node("Where", ["e", "s", "s"], ["w"]),
    ...          helper.make_node("Expand", ["x", "w"], ["y"])]
    >>> g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
    ...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> shape = lambda m: onnx.shape_inference.infer_shapes(m, data_prop=True).graph.output[0].type.tensor_type.shape
    >>> [d.HasField("dim_value") for d in shape(m).dim]     # Where stops ONNX's data propagation
    [False, False]
    >>> fold_shape_arithmetic(m, onnx.shape_inference.infer_shapes(m, data_prop=True))
    4
    >>> [d.dim_value for d in shape(m).dim]
    [2, 3]
    """
    import numpy as np
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    ig = inferred.graph
    types = {vi.name: vi.type.tensor_type for vi in list(ig.input) + list(ig.value_info) + list(ig.output)}
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    opsets = {o.domain: o.version for o in model.opset_import}
    folded, kept = [], []
    for node in model.graph.node:
        value = None
        if node.domain in ("", "ai.onnx") and node.op_type not in _NOT_FOLDED:
            if node.op_type == "Shape":
                value = _known_shape(node, types)
            elif all(types.get(o) is not None and types[o].elem_type in _INTEGER_TYPES for o in node.output) \
                    and all(i in values for i in node.input if i):
                try:
                    ref = ReferenceEvaluator(node, opsets=opsets)
                    value = ref.run(None, {i: values[i] for i in node.input if i})
                except Exception:  # an op the reference runtime lacks, or a bad node: leave it to inference
                    value = None
        if value is not None and all(np.size(v) <= _LIMIT for v in value):
            for name, v in zip(node.output, value):
                values[name] = np.asarray(v)
            folded.append(node)
        else:
            kept.append(node)
    if folded:
        del model.graph.node[:]
        model.graph.node.extend(kept)
        outputs = {o for n in folded for o in n.output if o}
        model.graph.initializer.extend(numpy_helper.from_array(values[o], o) for o in sorted(outputs))
    return len(folded)


def _known_shape(node, types) -> list | None:
    """The value of ``Shape(x)`` (with its ``start``/``end``) when every dimension of ``x`` is known."""
    import numpy as np

    tt = types.get(node.input[0])
    if tt is None or not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
        return None
    dims = [d.dim_value for d in tt.shape.dim]
    attrs = {a.name: a.i for a in node.attribute}
    return [np.array(dims[attrs.get("start", 0):attrs.get("end", len(dims))] if "end" in attrs
                     else dims[attrs.get("start", 0):], dtype=np.int64)]
