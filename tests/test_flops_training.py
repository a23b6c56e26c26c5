"""Cost models of the ops training graphs add (TensorFlow's gradients, sums, gathers, fills, copies), by hand.

Shapes are those of Keras VGG-16, ResNet-50 and MobileNetV2 training graphs
at batch 2 (``tests/fixtures_tf.py``), of the example torch models and of
BERT's ONNX export. ``one_op`` is the single-op graph of ``tests/test_flops.py``
(float32, so 4 bytes an element). An op whose cost needs a shape the graph
does not record is not costed, with the reason, and never costs zero.
"""
from __future__ import annotations

import math

import pytest

from dlsched.dag import COMPUTE, Graph
from dlsched.profiling.analytic import analytic_oracle
from dlsched.profiling.device_specs import BUILTIN
from dlsched.profiling.flops import explain_cost
from tests.test_flops import one_op


def _elements(*shapes) -> int:
    return sum(math.prod(s) for s in shapes)


# -- TensorFlow's convolution gradients ------------------------------------------------------------------------


def test_conv2d_backprop_filter_does_the_forward_macs():
    # VGG-16 block5_conv3: Conv2DBackpropFilter(input, filter_sizes, out_backprop) → the 3×3×512×512 weight's
    # gradient. Each of the 2·14·14·512 out_backprop elements meets 3·3·512 inputs: as many MACs as the forward.
    x, dy, w = [2, 14, 14, 512], [2, 14, 14, 512], [3, 3, 512, 512]
    _, c = one_op("Conv2DBackpropFilter", [x, [4], dy], w, data_format="NHWC")
    assert c.flops == 2 * (2 * 14 * 14 * 512) * (3 * 3 * 512) == 1_849_688_064
    assert c.bytes == 4 * _elements(x, [4], dy, w)
    _, fwd = one_op("Conv2D", [x, w], dy, weight=w, data_format="NHWC")
    assert c.flops == fwd.flops


def test_conv2d_backprop_filter_nchw():
    # Channels at dimension 1: C_out = 512 is out_backprop[1], not its last dimension (14).
    _, c = one_op("Conv2DBackpropFilter", [[2, 512, 14, 14], [4], [2, 512, 14, 14]], [3, 3, 512, 512],
                  data_format="NCHW")
    assert c.flops == 2 * (2 * 14 * 14 * 512) * (3 * 3 * 512)


def test_conv2d_backprop_filter_strided_1x1():
    # ResNet-50 conv5_block1_0_conv: 1×1, stride 2, 1024 → 2048 channels, 7×7 out_backprop.
    _, c = one_op("Conv2DBackpropFilter", [[2, 14, 14, 1024], [4], [2, 7, 7, 2048]], [1, 1, 1024, 2048],
                  strides=[1, 2, 2, 1])
    assert c.flops == 2 * (2 * 7 * 7 * 2048) * 1024


@pytest.mark.parametrize("multiplier", [1, 2])
def test_depthwise_backprop_filter(multiplier):
    # MobileNetV2 block_16_depthwise (multiplier 1): 3×3×960×1, each output element meets 9 inputs.
    cin = 960
    w, dy = [3, 3, cin, multiplier], [2, 3, 3, cin * multiplier]
    _, c = one_op("DepthwiseConv2dNativeBackpropFilter", [[2, 3, 3, cin], [4], dy], w)
    assert c.flops == 2 * (2 * 3 * 3 * cin * multiplier) * 9
    _, fwd = one_op("DepthwiseConv2dNative", [[2, 3, 3, cin], w], dy, weight=w)
    assert c.flops == fwd.flops


@pytest.mark.parametrize("op_type, w", [("Conv2DBackpropInput", [3, 3, 256, 512]),
                                        ("DepthwiseConv2dNativeBackpropInput", [3, 3, 512, 1])])
def test_backprop_input_reads_the_filter(op_type, w):
    # (input_sizes, filter, out_backprop) → the input's gradient, [2, 14, 14, w[2]].
    dy = [2, 14, 14, 512]
    _, c = one_op(op_type, [[4], w, dy], [2, 14, 14, w[2]])
    assert c.flops == 2 * _elements(dy) * math.prod(w) / 512


def test_backprop_filter_without_shapes_says_why():
    # The message names what is missing, not "no cost model" (the type has one).
    g, c = one_op("Conv2DBackpropFilter", [[None, 14, 14, 512], [4], [None, 14, 14, 512]], [3, 3, 512, 512])
    cost, why = explain_cost(g, g.op("x"))
    assert cost is None and "no cost model" not in why
    assert why.startswith("the 'Conv2DBackpropFilter' cost model cannot cost it: it needs out_backprop's shape")


# -- element-wise gradients and shape bookkeeping ---------------------------------------------------------------


@pytest.mark.parametrize("op_type, per_element", [
    ("Relu6Grad", 2),        # dy where 0 < x < 6: two compares, one select
    ("ReluGrad", 1),
    ("SigmoidGrad", 3),      # dy·y·(1 − y)
    ("TanhGrad", 3),         # dy·(1 − y²)
    ("RsqrtGrad", 4),        # −dy·y³/2
    ("SqrtGrad", 2),         # dy/(2y)
    ("ReciprocalGrad", 3),   # −dy·y²
    ("LeakyReluGrad", 2),
    ("EluGrad", 3),
    ("SeluGrad", 4),
    ("SoftplusGrad", 4),
    ("FloorMod", 1),         # InceptionV3's concat axis, and any x mod y
])
def test_tf_elementwise_gradients(op_type, per_element):
    shape = [2, 3, 3, 1280]
    _, c = one_op(op_type, [shape, shape], shape)
    assert c.flops == per_element * _elements(shape)
    assert c.bytes == 4 * 3 * _elements(shape)


@pytest.mark.parametrize("op_type, ins, out", [
    ("ConcatOffset", [[], [4], [4], [4], [4]], [4]),        # which slice of a concat each input's gradient is
    ("BroadcastGradientArgs", [[4], [4]], [2]),
    ("aten.slice.Tensor", [[2, 4, 16, 16]], [2, 4, 16, 8]),   # torch views
    ("aten.transpose.int", [[2, 16, 4, 16]], [2, 4, 16, 16]),
    ("aten.expand.default", [[1, 64]], [16, 64]),
    ("aten.empty_like.default", [[2, 16, 64]], [2, 16, 64]),  # allocates, writes nothing
])
def test_free_ops(op_type, ins, out):
    _, c = one_op(op_type, ins, out)
    assert (c.flops, c.bytes) == (0, 0)


# -- sums: one addition per input element beyond the output ----------------------------------------------------


@pytest.mark.parametrize("op_type, ins, out, adds", [
    ("aten.sum.dim_IntList", [[32, 10]], [1, 10], 32 * 10 - 10),        # a bias gradient: 31 adds per column
    ("Sum", [[2, 1000], []], [2, 1], 2 * 1000 + 1 - 2),                # TF, with its axis input
    ("BiasAddGrad", [[2, 7, 7, 64]], [64], 2 * 7 * 7 * 64 - 64),
    ("AddN", [[4, 5], [4, 5], [4, 5]], [4, 5], 2 * 20),                 # three tensors: two adds an element
    ("Sum", [[4, 5], [5]], [4, 5], 20),                                # ONNX, broadcast: one add an element
])
def test_sums(op_type, ins, out, adds):
    _, c = one_op(op_type, ins, out)
    assert c.flops == adds
    assert c.bytes == 4 * _elements(*ins, out)


# -- copies and fills --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op_type, ins, out", [
    ("Slice", [[2, 7, 7, 256], [4], [4]], [2, 7, 7, 64]),   # TF: InceptionV3's concat gradient, a new tensor
    ("Transpose", [[2, 16, 4, 16]], [2, 4, 16, 16]),         # ONNX attention heads, materialised
    ("Expand", [[1, 16], [2]], [2, 16]),
    ("Split", [[2, 16, 192]], [2, 16, 64]),
    ("StridedSlice", [[2, 16, 64], [3], [3], [3]], [2, 64]),
    ("ConcatV2", [[2, 7, 7, 64], [2, 7, 7, 96], []], [2, 7, 7, 160]),
])
def test_tf_and_onnx_copies_read_and_write(op_type, ins, out):
    _, c = one_op(op_type, ins, out)
    assert c.flops == 0 and c.bytes == 4 * _elements(*ins, out)


@pytest.mark.parametrize("op_type, ins, out", [
    ("aten.zeros.default", [], [32]),
    ("aten.ones_like.default", [[]], []),          # the loss gradient's seed: one element
    ("aten.arange.default", [], [16]),
    ("Fill", [[2], []], [2, 1000]),                 # TF
    ("ConstantOfShape", [[2]], [2, 16]),            # ONNX
])
def test_fills_write_their_output(op_type, ins, out):
    _, c = one_op(op_type, ins, out)
    assert (c.flops, c.bytes) == (0, 4 * _elements(out))


def test_gathers_read_only_the_picked_rows():
    # A 30522×768 embedding table looked up for 2×16 tokens moves 2×16 rows, not 94 MB.
    _, c = one_op("Gather", [[30522, 768], [2, 16]], [2, 16, 768])
    assert c.bytes == 4 * (2 * 16 + 2 * (2 * 16 * 768))


# -- unknown shapes are never zero -------------------------------------------------------------------------------


def test_unknown_output_size_is_not_costed():
    g, c = one_op("Add", [[2, 64], [2, 64]], [None, 64])
    assert c is None
    df, untimed = analytic_oracle(g, BUILTIN["cpu"])
    assert "x" not in set(df["op"])
    assert untimed["x"] == "the 'Add' cost model cannot cost it: its output shapes are unknown ([[None, 64]])"


@pytest.mark.parametrize("op_type", ["Relu", "Expand", "Gather", "aten.zeros.default", "MatMul", "Conv"])
def test_no_shapes_at_all_is_not_costed(op_type):
    g = Graph("bare")
    g.add_op("x", COMPUTE, op_type=op_type)
    cost, why = explain_cost(g, g.op("x"))
    assert cost is None and "unknown" in why


def test_an_unknown_input_dimension_broadcasts_from_the_output():
    # BERT's ONNX embeddings: Add([2, 16, 64], [None, 16, 64]) → [2, 16, 64]; the None is the output's 2.
    _, c = one_op("Add", [[2, 16, 64], [None, 16, 64]], [2, 16, 64])
    assert c.flops == 2 * 16 * 64 and c.bytes == 4 * 3 * (2 * 16 * 64)


def test_python_arithmetic_of_a_torch_capture_is_free():
    # Symbolic tracing records every tensor's shape; `d_model // heads` on Python ints has none and runs no kernel.
    g = Graph("traced", capture="symbolic_trace")
    g.add_op("floordiv", COMPUTE, op_type="floordiv")
    cost, why = explain_cost(g, g.op("floordiv"))
    assert why is None and (cost.flops, cost.bytes) == (0, 0)
    # Without a torch capture, the same op's missing shapes are unknown, not free.
    g.capture = None
    assert explain_cost(g, g.op("floordiv"))[0] is None


def test_onnx_mirrored_gradient_of_an_uncostable_op_says_why():
    g, _ = one_op("Expand", [[1, 16], [2]], [None, 16])
    g.add_op("x/grad", COMPUTE, op_type="ExpandGrad", phase="backward")
    cost, why = explain_cost(g, g.op("x/grad"))
    assert cost is None and why.startswith("its forward op cannot be costed: the 'Expand' cost model")


def test_onnx_gradient_accumulation_sums_its_inputs():
    # A weight read by three ops: its ONNX gradient is a Sum of three [64, 64] gradients (the importer records
    # the count, not the shapes): two adds an element, three read and one written.
    g = Graph("shared")
    g.add_op("w/grad_accum", COMPUTE, op_type="Sum", phase="backward", output_shapes=[[64, 64]],
             dtypes=["float32"], attrs={"inputs": 3})
    cost, _ = explain_cost(g, g.op("w/grad_accum"))
    assert (cost.flops, cost.bytes) == (2 * 64 * 64, 4 * 4 * 64 * 64)
