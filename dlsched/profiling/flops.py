"""FLOPs and bytes moved per op, from shapes: the inputs of the analytic oracle.

One table covers the op types the three importers produce: ONNX op types
(``Conv``), torch modules and functions (``Conv2d``, ``add``), aten overloads
(``aten.convolution.default``) and TensorFlow ops (``Conv2D``). Names are
normalised (lower case, namespace and overload stripped) before lookup.

Conventions
-----------
- One multiply-accumulate is 2 FLOPs, so ResNet-50's 4.1 GMACs are 8.2 GFLOPs.
- Convolution: ``2 · |output| · |weight| / C_out``; the weight is the rank-4
  recv feeding the op (or its second input). TensorFlow's backward kernels do
  the forward's MACs, with ``out_backprop`` (their third input) in the place
  of the output: ``Conv2DBackpropInput(input_sizes, filter, out_backprop)``
  reads the weight, ``Conv2DBackpropFilter(input, filter_sizes, out_backprop)``
  writes it, so its weight shape is its own output (likewise the depthwise ones).
- Matrix products: ``2 · |output| · K`` with K the contracted dimension.
- Element-wise ops: a small constant number of FLOPs per output element. An
  input dimension the graph leaves unknown is the output's (broadcasting).
- Sums (``sum``, ``AddN``, ``BiasAddGrad``, ONNX ``Sum``): one addition per
  input element beyond the output, at least one per output element:
  ``max(Σ|inputs| − |output|, |output|)``.
- Gathers (``embedding``, ``index``, ``gather``, ``GatherElements``…) read
  their indices and the elements they pick, and write those: ``Σ|indices| +
  2·|output|`` elements moved (the source is not read whole), no FLOPs.
- Fills (``zeros``, ``ones_like``, ``full_like``, ``new_ones``, ``arange``,
  TF ``Fill``, ONNX ``ConstantOfShape``…) write their output, no FLOPs.
- Copies (``cat``, ``clone``, ``pad``…, and TensorFlow's and ONNX's ``Slice``,
  ``Split``, ``Transpose``, ``Expand``, which materialise what torch's
  namesakes only view) read their inputs and write their outputs.
- Shape-only ops (reshape, view, squeeze, torch's slice and transpose views,
  shape arithmetic like TF's ``ConcatOffset``…) cost nothing and move nothing.
- Backward ops cost what their forward counterpart costs, times two for
  convolutions and matrix products (gradients w.r.t. input and weight).
- Attention (``scaled_dot_product_attention`` and its aten kernels), with
  queries ``[…, L, E]``, keys ``[…, S, E]``, values ``[…, S, Ev]`` and
  ``BH`` batch × heads: forward ``2·BH·L·S·(E + Ev)`` for ``QKᵀ`` and ``PV``
  plus 4 per score (scale, softmax); backward ``2·BH·L·S·(3E + 2Ev)`` (``QKᵀ``
  recomputed, then ``dV``, ``dP``, ``dQ``, ``dK``) plus 5 per score (scale,
  ``exp`` against the saved log-sum-exp, ``dS = P·(dP − D)``). Every score is
  counted, causal or not: a roofline estimate, not a kernel's skipping.
- An op is *not costable* when its type is missing from the table, or when
  its cost needs a shape the graph does not record (an output of unknown
  size, a convolution's weight): :func:`explain_cost` says which, and
  :func:`op_cost` returns ``None``. The caller must report it, never treat it
  as free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dlsched.dag import Graph, Op, dtype_size


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float


class _Uncostable(Exception):
    """An op of a known type whose shapes lack what its cost model needs (the message says what)."""


# Shape/metadata ops: no arithmetic, no data movement (views or host-side bookkeeping).
FREE = {
    "reshape", "view", "_unsafe_view", "flatten", "squeeze", "unsqueeze", "expand", "identity", "shape", "size",
    "getattr", "getitem", "t", "detach", "alias", "constant", "dropout", "noop", "placeholder",
    "squeeze_", "unsqueeze_", "expand_as", "view_as", "stopgradient", "preventgradient", "const", "readvariableop",
    "flatten_using_ints", "sym_size", "numel", "dim", "contiguous", "lift_fresh_copy", "_reshape_alias",
    "dropout_", "chunk", "split", "split_with_sizes", "unbind", "select", "slice", "narrow", "as_strided",
    "empty", "empty_like", "new_empty", "shapen", "pack_shape",
    "split_tensor", "tensor_split", "unflatten", "permute", "transpose", "expand_dims", "expanddims",
    # TensorFlow's gradient bookkeeping on shape vectors (which slice of a concat, which axes broadcast).
    "concatoffset", "broadcastgradientargs",
}
# Ops that copy data: bytes moved, no FLOPs.
COPY = {
    "concat", "cat", "stack", "pack", "pad", "constant_pad_nd",
    "transpose_copy", "clone", "copy", "copy_", "_to_copy", "to", "cast", "tile", "repeat", "slice_scatter",
    "select_scatter", "embedding_dense_backward", "scatter", "index_put", "split_copy",
    "zeros_like_copy", "masked_fill", "where", "select_backward", "slice_backward", "conjugatetranspose",
    "concatv2", "slicev", "identityn", "mirrorpad", "cast_like", "index_put_", "masked_fill_",
    "stridedslice", "splitv", "unpack",
}
# Op types (exact spelling) that copy in TensorFlow and ONNX, where torch's lower-case namesakes are views.
COPY_CASED = {"Slice", "Split", "Transpose", "Expand"}
# Ops that read indices and the elements they pick (see the module docstring).
GATHER = {"gather", "gatherv2", "embedding", "index_select", "index", "resourcegather", "gatherelements",
          "gather_elements", "gathernd", "take_along_dim"}
# Ops that write a new tensor without reading one.
FILL = {"zeros", "ones", "zeros_like", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
        "range", "arange", "scalar_tensor", "fill", "constantofshape"}
# Additions of several tensors, or of a tensor's elements (see the module docstring).
SUM = {"sum", "addn", "sum_inputs", "accumulate", "biasaddgrad"}
# FLOPs per output element.
ELEMENTWISE = {
    "add": 1, "add_": 1, "addv2": 1, "sub": 1, "rsub": 1, "mul": 1, "mul_": 1, "div": 1, "truediv": 1,
    "realdiv": 1, "neg": 1, "abs": 1, "relu": 1, "relu_": 1, "relu6": 1, "threshold_backward": 1,
    "relugrad": 1, "clip": 1, "clamp": 1, "hardtanh": 1, "leakyrelu": 2, "leaky_relu": 2, "max": 1, "min": 1,
    "maximum": 1, "minimum": 1, "sqrt": 1, "rsqrt": 1, "reciprocal": 1, "square": 1, "pow": 1, "exp": 1,
    "log": 1, "sigmoid": 4, "tanh": 4, "erf": 4, "gelu": 8, "silu": 5, "softplus": 4, "biasadd": 1,
    "sigmoid_backward": 3, "tanh_backward": 3, "gelu_backward": 12, "silu_backward": 8, "squareddifference": 2,
    "addcmul": 2, "addcdiv": 2, "lerp": 3, "eq": 1, "ne": 1, "lt": 1, "gt": 1, "le": 1, "ge": 1, "equal": 1,
    "greater": 1, "less": 1, "logicaland": 1, "not": 1, "bitwise_not": 1, "floor": 1, "ceil": 1, "round": 1,
    "sign": 1, "mod": 1, "floordiv": 1, "floor_divide": 1, "floormod": 1, "fmod": 1, "selu": 4, "elu": 4,
    "softsign": 3,
    "hardswish": 4, "hardsigmoid": 3, "mish": 8, "fill_": 0, "scalarmul": 1,
    "bitwise_and": 1, "logical_not": 1, "isnan": 1, "isinf": 1, "nan_to_num": 1,
    "native_dropout": 2, "native_dropout_backward": 1, "relugradgrad": 1,
    "div_": 1, "sub_": 1, "sin": 1, "cos": 1,
    # A mask: one index compare (and select) per element.
    "tril": 1, "triu": 1,
    # Dropout's mask, decomposed: one random draw and one compare per element.
    "bernoulli": 2, "bernoulli_": 2,
    # TensorFlow's activation gradients, f'(x)·dy from the saved input x or output y:
    # Relu6Grad dy·(0 < x < 6), SigmoidGrad dy·y·(1 − y), TanhGrad dy·(1 − y²), RsqrtGrad −dy·y³/2,
    # SqrtGrad dy/(2y), ReciprocalGrad −dy·y², LeakyReluGrad x > 0 ? dy : α·dy, EluGrad, SeluGrad, SoftplusGrad.
    "relu6grad": 2, "sigmoidgrad": 3, "tanhgrad": 3, "rsqrtgrad": 4, "sqrtgrad": 2, "reciprocalgrad": 3,
    "leakyrelugrad": 2, "elugrad": 3, "selugrad": 4, "softplusgrad": 4,
}
# Normalisations and reductions: FLOPs per *input* element.
REDUCTION = {
    "batchnorm2d": 2, "batchnormalization": 2, "fusedbatchnorm": 2, "fusedbatchnormv3": 2,
    "_native_batch_norm_legit_functional": 4, "_native_batch_norm_legit_no_training": 2, "native_batch_norm": 4,
    "batch_norm": 2, "native_batch_norm_backward": 6, "fusedbatchnormgradv3": 6, "fusedbatchnormgrad": 6,
    "layernorm": 5, "layernormalization": 5, "native_layer_norm": 5, "layer_norm": 5,
    "native_layer_norm_backward": 10, "groupnorm": 5, "instancenormalization": 5, "softmax": 3, "_softmax": 3,
    "_safe_softmax": 4,  # softmax, and rows masked entirely set to zero
    "log_softmax": 3, "_log_softmax": 3, "logsoftmax": 3, "_softmax_backward_data": 3,
    "_log_softmax_backward_data": 3, "softmax_backward": 3, "mean": 1, "reducemean": 1, "reducesum": 1,
    "sum_dim": 1, "amax": 1, "argmax": 1, "reducemax": 1, "var": 3, "var_mean": 3, "std": 3, "norm": 2,
    "globalaveragepool": 1, "adaptiveavgpool2d": 1, "adaptive_avg_pool2d": 1, "_adaptive_avg_pool2d": 1,
    "_adaptive_avg_pool2d_backward": 1, "adaptive_avg_pool2d_backward": 1, "crossentropyloss": 4,
    "cross_entropy": 4, "nll_loss_forward": 1, "nll_loss_backward": 1, "nll_loss": 1, "mse_loss": 3,
    "sparsesoftmaxcrossentropywithlogits": 4, "softmaxcrossentropywithlogits": 4, "l2loss": 2, "prod": 1,
    "cumsum": 1, "histc": 1, "topk": 2, "sort": 2, "reducel2": 2, "reducelogsumexp": 3, "logsumexp": 3,
    "frobenius_norm": 2,
}
POOL = {"maxpool", "maxpool2d", "max_pool2d", "max_pool2d_with_indices", "averagepool", "avgpool",
        "avg_pool2d", "avgpool2d", "max_pool2d_with_indices_backward", "maxpoolgrad", "avgpoolgrad",
        "avg_pool2d_backward", "maxpoolv2", "maxpool3d", "adaptivemaxpool2d"}
CONV = {"conv", "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "convtranspose", "convtranspose2d",
        "depthwiseconv2dnative", "conv2dbackpropinput", "conv2dbackpropfilter", "convolution_backward",
        "depthwiseconv2dnativebackpropinput", "depthwiseconv2dnativebackpropfilter", "cudnn_convolution"}
MATMUL = {"gemm", "matmul", "mm", "addmm", "bmm", "baddbmm", "linear", "batchmatmul", "batchmatmulv2",
          "batchmatmulv3", "einsum", "matmul_", "dot", "addmv", "mv", "_grouped_mm"}
# Fused attention: q, k, v are the first three inputs (forward) or give their shapes to the
# first three outputs, the gradients (backward).
ATTENTION = {"scaled_dot_product_attention", "_scaled_dot_product_attention_math",
             "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention"}
ATTENTION_BACKWARD = {"_scaled_dot_product_flash_attention_for_cpu_backward",
                      "_scaled_dot_product_flash_attention_backward",
                      "_scaled_dot_product_efficient_attention_backward"}
# Backward ops of convolutions / products that compute both input and weight gradients.
DOUBLE = {"convolution_backward"}
# TensorFlow's convolution gradients: out_backprop is the third input; the weight is the second input
# (…BackpropInput) or the output (…BackpropFilter).
TF_CONV_BACKPROP = {"conv2dbackpropinput", "conv2dbackpropfilter", "depthwiseconv2dnativebackpropinput",
                    "depthwiseconv2dnativebackpropfilter", "conv3dbackpropinputv2", "conv3dbackpropfilterv2"}
CONV |= TF_CONV_BACKPROP
TF_CONV = {"Conv2D", "Conv3D", "DepthwiseConv2dNative"}  # op types whose data_format defaults to channels last


def normalise(op_type: str) -> str:
    """``aten.convolution.default`` → ``convolution``; ``Conv2D`` → ``conv2d``; ``FooGrad`` kept."""
    t = op_type.strip()
    if t.startswith("aten."):
        t = t.split(".")[1]
    elif t.startswith("aten::"):
        t = t[6:]
    if t.startswith("torch.") or t.startswith("operator."):
        t = t.rsplit(".", 1)[-1]
    return t.lower()


def _known(shape) -> bool:
    return shape is not None and all(isinstance(d, (int, float)) and d >= 0 for d in shape)


def _numel(shape) -> int:
    return math.prod(int(d) for d in shape)


def _outputs(op: Op) -> list[list[int]]:
    """The output shapes, every dimension known (else the op cannot be costed)."""
    outs = op.output_shapes or []
    if not outs or not all(_known(s) for s in outs):
        raise _Uncostable(f"its output shapes are unknown ({outs or 'none recorded'})")
    return outs


def _inputs(op: Op) -> list[list[int]]:
    """The input shapes, a dimension left unknown taking the first output's (right-aligned, as broadcasting)."""
    ins = []
    for s in op.input_shapes or []:
        if not _known(s):
            like = _outputs(op)[0]
            if s is None or len(s) > len(like):
                raise _Uncostable(f"an input shape is unknown ({s})")
            s = [like[len(like) - len(s) + i] if not _known([d]) else d for i, d in enumerate(s)]
        ins.append(s)
    return ins


def _tensor_bytes(shapes, dtypes) -> float:
    total = 0.0
    for i, s in enumerate(shapes):
        dt = dtypes[i] if dtypes and i < len(dtypes) else (dtypes[0] if dtypes else "float32")
        total += _numel(s) * dtype_size(dt)
    return total


def _param_shapes(graph: Graph, op: Op) -> list[list[int]]:
    return [graph.op(p).shape for p in graph.predecessors(op.name) if graph.op(p).kind == "recv" and graph.op(p).shape]


def _conv_macs(graph: Graph, op: Op, norm: str) -> float:
    if norm in TF_CONV_BACKPROP:
        ins = op.input_shapes or []
        grad = ins[2] if len(ins) > 2 else None
        w = (op.output_shapes or [None])[0] if "filter" in norm else (ins[1] if len(ins) > 1 else None)
        if not (_known(grad) and _known(w)) or len(grad) != len(w):
            raise _Uncostable(f"it needs out_backprop's shape and the filter's (inputs {ins}, "
                              f"outputs {op.output_shapes})")
        nchw = str(op.attrs.get("data_format", "NHWC")).upper().startswith("NC")
        return _numel(grad) * _numel(w) / grad[1 if nchw else -1]
    weights = [s for s in _param_shapes(graph, op) if len(s) >= 3]
    if not weights:  # aten.convolution_backward(grad_output, input, weight); the forward (input, weight)
        weights = [s for s in (op.input_shapes or [])[(2 if norm == "convolution_backward" else 1):][:1]
                   if _known(s) and len(s) >= 3]
    if not weights and "kernel_size" in op.attrs:  # torch module with its weight not a transfer
        k = op.attrs["kernel_size"]
        k = k if isinstance(k, (list, tuple)) else [k, k]
        weights = [[op.attrs["out_channels"], op.attrs["in_channels"] // op.attrs.get("groups", 1), *k]]
    if not weights:
        raise _Uncostable("the weight's shape is unknown")
    w = weights[0]
    if norm == "convolution_backward":
        # The forward output has the shape of the incoming gradient, the first input.
        grads = [s for s in (op.input_shapes or []) if _known(s) and len(s) == len(w)]
        if not grads:
            raise _Uncostable(f"the incoming gradient's shape is unknown ({op.input_shapes})")
        return _numel(grads[0]) * _numel(w) / grads[0][1]
    out = _outputs(op)[0]
    # NCHW (torch, ONNX) keeps channels at dim 1; TF's default NHWC (NDHWC) at the end.
    layout = op.attrs.get("data_format", "NHWC" if op.op_type in TF_CONV else "NCHW")
    cout = out[1] if str(layout).upper().startswith("NC") else out[-1]
    if not cout:
        raise _Uncostable(f"its output has no channels ({out})")
    return _numel(out) * _numel(w) / cout


def _matmul_macs(graph: Graph, op: Op, norm: str) -> float:
    out = sum(_numel(s) for s in _outputs(op))
    if norm == "linear":
        ws = [s for s in _param_shapes(graph, op) if len(s) == 2]
        k = ws[0][1] if ws else op.attrs.get("in_features")
        if not k:
            raise _Uncostable("the weight's shape is unknown")
        return out * k
    ins = _inputs(op)
    if norm in ("addmm", "baddbmm", "addmv"):
        ins = ins[1:]
    if not ins or not ins[0]:
        raise _Uncostable(f"the first factor's shape is unknown ({op.input_shapes})")
    a = ins[0]
    trans_a = op.attrs.get("transA") or op.attrs.get("transpose_a") or op.attrs.get("adj_x")
    macs = out * (a[-2] if (trans_a and len(a) >= 2) else a[-1])
    outs = _outputs(op)
    if norm == "_grouped_mm" and len(a) == 2 and outs and len(outs[0]) == 3:
        # Mixture-of-experts weight gradient: [K, T] × [T, N] → one [K, N] per expert, each over its own tokens.
        macs /= outs[0][0]
    return macs


def _attention_flops(op: Op, norm: str) -> float:
    """FLOPs of fused attention (see the module docstring)."""
    if norm in ATTENTION_BACKWARD:
        qkv = [s for s in (op.output_shapes or [])[:3] if s]
    else:
        qkv = [s for s in (op.input_shapes or [])[:3] if s]
        # An fx node lists each input node once: self-attention on one tensor has fewer shapes.
        while qkv and len(qkv) < 3:
            qkv.append(qkv[-1])
    if len(qkv) < 3 or any(len(s) < 2 or not _known(s) for s in qkv):
        raise _Uncostable(f"the shapes of q, k and v are unknown ({op.input_shapes} → {op.output_shapes})")
    q, k, v = qkv
    length, e, keys, ev = q[-2], q[-1], k[-2], v[-1]
    scores = _numel(q[:-2]) * length * keys  # BH·L·S
    if norm in ATTENTION_BACKWARD:
        return 2 * scores * (3 * e + 2 * ev) + 5 * scores
    return 2 * scores * (e + ev) + 4 * scores


def _cost(graph: Graph, op: Op, norm: str) -> Cost:
    """The cost of a compute op whose normalised type ``norm`` is in the table; raises :class:`_Uncostable`."""
    if norm in FREE and op.op_type not in COPY_CASED:
        return Cost(0.0, 0.0)
    outs = _outputs(op)
    out = sum(_numel(s) for s in outs)
    if norm in FILL:
        return Cost(0.0, _tensor_bytes(outs, op.dtypes))
    ins = _inputs(op)
    if not ins and norm in SUM and op.attrs.get("inputs"):  # ONNX's gradient accumulation: k of its own shape
        ins = list(outs) * int(op.attrs["inputs"])
    if norm in GATHER:  # the source (the first input of several) is read only where picked
        indices = sum(_numel(s) for s in (ins[1:] if len(ins) > 1 else ins))
        return Cost(0.0, (indices + 2 * out) * dtype_size(op.dtypes[0] if op.dtypes else "float32"))
    moved = _tensor_bytes(ins, op.dtypes) + _tensor_bytes(outs, op.dtypes)
    if not op.input_shapes:  # modules own their weights: count the parameters they read
        moved += sum(graph.op(p).bytes for p in graph.predecessors(op.name) if graph.op(p).kind == "recv")
    if norm in COPY or op.op_type in COPY_CASED:
        return Cost(0.0, moved)
    if norm in CONV:
        return Cost(2 * _conv_macs(graph, op, norm) * (2 if norm in DOUBLE else 1), moved)
    if norm in MATMUL:
        return Cost(2 * _matmul_macs(graph, op, norm), moved)
    if norm in ATTENTION or norm in ATTENTION_BACKWARD:
        return Cost(_attention_flops(op, norm), moved)
    if norm in SUM:
        return Cost(max(sum(_numel(s) for s in ins) - out, out), moved)
    if norm in ELEMENTWISE:
        return Cost(ELEMENTWISE[norm] * out, moved)
    if norm in REDUCTION:
        return Cost(REDUCTION[norm] * sum(_numel(s) for s in (ins or outs)), moved)
    # POOL
    k = op.attrs.get("kernel_shape") or op.attrs.get("kernel_size") or op.attrs.get("ksize") or [1]
    k = k if isinstance(k, (list, tuple)) else [k, k]
    return Cost(out * max(1, math.prod(int(x) for x in k)), moved)


KNOWN = (FREE | COPY | GATHER | FILL | SUM | set(ELEMENTWISE) | set(REDUCTION) | POOL | CONV | MATMUL | ATTENTION
         | ATTENTION_BACKWARD)


def explain_cost(graph: Graph, op: Op) -> tuple[Cost | None, str | None]:
    """``(cost, None)`` for a compute op the table can cost, else ``(None, why not)``.

    Examples
    --------
    >>> from dlsched.dag import Graph, COMPUTE
    >>> g = Graph("why")
    >>> _ = g.add_op("f", COMPUTE, op_type="Conv2DBackpropFilter", input_shapes=[[1, 8, 8, 3], [4], [1, 8, 8, 16]],
    ...              output_shapes=[[3, 3, 3, 16]], dtypes=["float32"])
    >>> explain_cost(g, g.op("f"))[0].flops   # the forward's MACs, 2 FLOPs each: 2·(8·8·16)·(3·3·3)
    55296.0
    >>> g.op("f").output_shapes = [[3, 3, None, 16]]      # a dimension the graph did not record
    >>> print(explain_cost(g, g.op("f"))[1])
    the 'Conv2DBackpropFilter' cost model cannot cost it: its output shapes are unknown ([[3, 3, None, 16]])
    >>> print(explain_cost(g, g.add_op("u", COMPUTE, op_type="MyOp"))[1])
    no cost model for op type 'MyOp'
    """
    norm = normalise(op.op_type)
    mirrored = norm.endswith("grad") and op.name.endswith("/grad") and op.name[:-5] in graph
    if mirrored:  # ONNX's synthesised backward: twice its forward op (see importers.onnx_importer)
        fwd, why = explain_cost(graph, graph.op(op.name[:-5]))
        return (None, f"its forward op cannot be costed: {why}") if fwd is None else \
            (Cost(2 * fwd.flops, 2 * fwd.bytes), None)
    if graph.capture and not op.input_shapes and not op.output_shapes:
        # A torch capture records every tensor's shape: an op with none is Python arithmetic on sizes.
        return Cost(0.0, 0.0), None
    if norm not in KNOWN and op.op_type not in COPY_CASED:
        return None, f"no cost model for op type {op.op_type!r}"
    try:
        return _cost(graph, op, norm), None
    except _Uncostable as e:
        return None, f"the {op.op_type!r} cost model cannot cost it: {e}"


def op_cost(graph: Graph, op: Op) -> Cost | None:
    """FLOPs and bytes moved by a compute op, or ``None`` if it cannot be costed (see :func:`explain_cost`).

    Examples
    --------
    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("conv")
    >>> _ = g.add_op("w", RECV, shape=[64, 3, 7, 7], params=9408, bytes=37632)
    >>> _ = g.add_op("c", COMPUTE, op_type="Conv", input_shapes=[[1, 3, 224, 224], [64, 3, 7, 7]],
    ...              output_shapes=[[1, 64, 112, 112]], dtypes=["float32"])
    >>> g.add_edge("w", "c")
    >>> op_cost(g, g.op("c")).flops / 1e6   # 118 MMACs
    236.027904
    """
    return explain_cost(graph, op)[0]


def graph_flops(graph: Graph, phase: str | None = None) -> tuple[float, list[str]]:
    """Total FLOPs of the compute ops (optionally one ``phase``) and the ops it could not cost."""
    total, unknown = 0.0, []
    for op in graph.compute_ops():
        if phase and op.phase != phase:
            continue
        c = op_cost(graph, op)
        if c is None:
            unknown.append(op.name)
        else:
            total += c.flops
    return total, unknown
