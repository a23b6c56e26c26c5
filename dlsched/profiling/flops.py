"""FLOPs and bytes moved per op, from shapes: the inputs of the analytic oracle.

One table covers the op types the three importers produce: ONNX op types
(``Conv``), torch modules and functions (``Conv2d``, ``add``), aten overloads
(``aten.convolution.default``) and TensorFlow ops (``Conv2D``). Names are
normalised (lower case, namespace and overload stripped) before lookup.

Conventions
-----------
- One multiply-accumulate is 2 FLOPs, so ResNet-50's 4.1 GMACs are 8.2 GFLOPs.
- Convolution: ``2 · |output| · |weight| / C_out``; the weight is the rank-4
  recv feeding the op (or its second input).
- Matrix products: ``2 · |output| · K`` with K the contracted dimension.
- Element-wise ops: a small constant number of FLOPs per output element.
- Shape-only ops (reshape, view, squeeze…) cost nothing and move nothing.
- Backward ops cost what their forward counterpart costs, times two for
  convolutions and matrix products (gradients w.r.t. input and weight).
- Attention (``scaled_dot_product_attention`` and its aten kernels), with
  queries ``[…, L, E]``, keys ``[…, S, E]``, values ``[…, S, Ev]`` and
  ``BH`` batch × heads: forward ``2·BH·L·S·(E + Ev)`` for ``QKᵀ`` and ``PV``
  plus 4 per score (scale, softmax); backward ``2·BH·L·S·(3E + 2Ev)`` (``QKᵀ``
  recomputed, then ``dV``, ``dP``, ``dQ``, ``dK``) plus 5 per score (scale,
  ``exp`` against the saved log-sum-exp, ``dS = P·(dP − D)``). Every score is
  counted, causal or not: a roofline estimate, not a kernel's skipping.
- An op type missing from the table is *not costable*: :func:`op_cost`
  returns ``None`` and the caller must report it, never treat it as free.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dlsched.dag import COMPUTE, Graph, Op, dtype_size


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float


# Shape/metadata ops: no arithmetic, no data movement (views or host-side bookkeeping).
FREE = {
    "reshape", "view", "_unsafe_view", "flatten", "squeeze", "unsqueeze", "expand", "identity", "shape", "size",
    "getattr", "getitem", "t", "detach", "alias", "constant", "constantofshape", "dropout", "noop", "placeholder",
    "squeeze_", "unsqueeze_", "expand_as", "view_as", "stopgradient", "preventgradient", "const", "readvariableop",
    "flatten_using_ints", "sym_size", "numel", "dim", "contiguous", "lift_fresh_copy", "_reshape_alias",
    "dropout_", "chunk", "split", "split_with_sizes", "unbind", "select", "slice", "narrow", "as_strided",
    "range", "arange", "zeros", "ones", "zeros_like", "ones_like", "empty", "empty_like", "full", "new_zeros",
    "new_empty", "scalar_tensor", "shapen", "pack_shape", "stridedslice", "full_like", "new_ones", "new_full",
    "split_tensor", "tensor_split", "unflatten", "permute", "transpose", "expand_dims", "expanddims",
}
# Ops that copy data: bytes moved, no FLOPs.
COPY = {
    "concat", "cat", "stack", "pack", "gather", "gatherv2", "embedding", "index_select", "pad", "constant_pad_nd",
    "transpose_copy", "clone", "copy", "copy_", "_to_copy", "to", "cast", "tile", "repeat", "slice_scatter",
    "select_scatter", "embedding_dense_backward", "scatter", "index_put", "resourcegather", "split_copy",
    "zeros_like_copy", "masked_fill", "where", "select_backward", "slice_backward", "conjugatetranspose",
    "concatv2", "slicev", "identityn", "mirrorpad", "fill", "cast_like",
    "index", "gatherelements", "gather_elements", "index_put_", "masked_fill_",
}
# FLOPs per output element.
ELEMENTWISE = {
    "add": 1, "add_": 1, "addv2": 1, "sub": 1, "rsub": 1, "mul": 1, "mul_": 1, "div": 1, "truediv": 1,
    "realdiv": 1, "neg": 1, "abs": 1, "relu": 1, "relu_": 1, "relu6": 1, "threshold_backward": 1, "reluGrad": 1,
    "relugrad": 1, "clip": 1, "clamp": 1, "hardtanh": 1, "leakyrelu": 2, "leaky_relu": 2, "max": 1, "min": 1,
    "maximum": 1, "minimum": 1, "sqrt": 1, "rsqrt": 1, "reciprocal": 1, "square": 1, "pow": 1, "exp": 1,
    "log": 1, "sigmoid": 4, "tanh": 4, "erf": 4, "gelu": 8, "silu": 5, "softplus": 4, "biasadd": 1,
    "sigmoid_backward": 3, "tanh_backward": 3, "gelu_backward": 12, "silu_backward": 8, "squareddifference": 2,
    "addcmul": 2, "addcdiv": 2, "lerp": 3, "eq": 1, "ne": 1, "lt": 1, "gt": 1, "le": 1, "ge": 1, "equal": 1,
    "greater": 1, "less": 1, "logicaland": 1, "not": 1, "bitwise_not": 1, "floor": 1, "ceil": 1, "round": 1,
    "sign": 1, "mod": 1, "floordiv": 1, "fmod": 1, "selu": 4, "elu": 4, "softsign": 3, "hardswish": 4,
    "hardsigmoid": 3, "mish": 8, "fill_": 0, "scalarmul": 1, "addn": 1, "sum_inputs": 1, "sum": 1,
    "accumulate": 1, "bitwise_and": 1, "logical_not": 1, "isnan": 1, "isinf": 1, "nan_to_num": 1,
    "native_dropout": 2, "native_dropout_backward": 1, "relugradgrad": 1, "biasaddgrad": 1,
    "div_": 1, "sub_": 1, "sin": 1, "cos": 1,
    # A mask: one index compare (and select) per element.
    "tril": 1, "triu": 1,
    # Dropout's mask, decomposed: one random draw and one compare per element.
    "bernoulli": 2, "bernoulli_": 2,
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
    "cumsum": 1, "topk": 2, "sort": 2, "reducel2": 2, "reducelogsumexp": 3, "logsumexp": 3, "frobenius_norm": 2,
}
POOL = {"maxpool", "maxpool2d", "max_pool2d", "max_pool2d_with_indices", "averagepool", "avgpool",
        "avg_pool2d", "avgpool2d", "max_pool2d_with_indices_backward", "maxpoolgrad", "avgpoolgrad",
        "avg_pool2d_backward", "maxpoolv2", "maxpool3d", "adaptivemaxpool2d"}
CONV = {"conv", "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "convtranspose", "convtranspose2d",
        "depthwiseconv2dnative", "conv2dbackpropinput", "conv2dbackpropfilter", "convolution_backward",
        "depthwiseconv2dnativebackpropinput", "depthwiseconv2dnativebackpropfilter", "cudnn_convolution"}
MATMUL = {"gemm", "matmul", "mm", "addmm", "bmm", "baddbmm", "linear", "batchmatmul", "batchmatmulv2",
          "batchmatmulv3", "einsum", "matmul_", "dot", "addmv", "mv"}
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


def _numel(shape) -> int:
    if shape is None:
        return 0
    n = 1
    for d in shape:
        if d is None or (isinstance(d, (int, float)) and d < 0):
            return 0
        n *= int(d)
    return n


def _out_elems(op: Op) -> int:
    return sum(_numel(s) for s in op.output_shapes or [])


def _tensor_bytes(shapes, dtypes) -> float:
    total = 0.0
    for i, s in enumerate(shapes or []):
        dt = dtypes[i] if dtypes and i < len(dtypes) else (dtypes[0] if dtypes else "float32")
        total += _numel(s) * dtype_size(dt)
    return total


def _param_shapes(graph: Graph, op: Op) -> list[list[int]]:
    return [graph.op(p).shape for p in graph.predecessors(op.name) if graph.op(p).kind == "recv" and graph.op(p).shape]


def _conv_macs(graph: Graph, op: Op, norm: str) -> float | None:
    weights = [s for s in _param_shapes(graph, op) if len(s) >= 3]
    if not weights:
        weights = [s for s in (op.input_shapes or [])[1:2] if s and len(s) >= 3]
    if not weights and "kernel_size" in op.attrs:  # torch module with its weight not a transfer
        k = op.attrs["kernel_size"]
        k = k if isinstance(k, (list, tuple)) else [k, k]
        weights = [[op.attrs["out_channels"], op.attrs["in_channels"] // op.attrs.get("groups", 1), *k]]
    if not weights:
        return None
    w = weights[0]
    if norm in ("conv2dbackpropinput", "conv2dbackpropfilter", "depthwiseconv2dnativebackpropinput",
                "depthwiseconv2dnativebackpropfilter", "convolution_backward"):
        # The forward output has the shape of the incoming gradient (first non-index input).
        grads = [s for s in (op.input_shapes or []) if s and len(s) == len(w)]
        ref = grads[-1] if norm.startswith(("conv2d", "depthwise")) else (grads[0] if grads else None)
        if ref is None:
            return None
        out = _numel(ref)
        cout = ref[1] if norm == "convolution_backward" else ref[-1]
    else:
        if not op.output_shapes:
            return None
        out = _numel(op.output_shapes[0])
        # NCHW (torch, ONNX) keeps channels at dim 1; TF's NHWC at the end.
        nhwc = op.attrs.get("data_format", "NHWC" if norm in ("conv2d", "depthwiseconv2dnative") and
                            op.op_type[0].isupper() and op.op_type.endswith("D") else "NCHW")
        cout = op.output_shapes[0][-1] if str(nhwc).upper().startswith("NH") else op.output_shapes[0][1]
    if not cout:
        return None
    return out * _numel(w) / cout


def _matmul_macs(graph: Graph, op: Op, norm: str) -> float | None:
    out = _out_elems(op) if op.output_shapes else 0
    if not out:
        return None
    if norm == "linear":
        ws = [s for s in _param_shapes(graph, op) if len(s) == 2]
        k = ws[0][1] if ws else op.attrs.get("in_features")
        return out * k if k else None
    ins = [s for s in (op.input_shapes or []) if s is not None]
    if norm in ("addmm", "baddbmm", "addmv"):
        ins = ins[1:]
    if not ins:
        return None
    a = ins[0]
    if len(a) < 1:
        return None
    trans_a = op.attrs.get("transA") or op.attrs.get("transpose_a") or op.attrs.get("adj_x")
    k = a[-2] if (trans_a and len(a) >= 2) else a[-1]
    return out * k if k else None


def _attention_flops(op: Op, norm: str) -> float | None:
    """FLOPs of fused attention (see the module docstring), or ``None`` without q/k/v shapes."""
    if norm in ATTENTION_BACKWARD:
        qkv = [s for s in (op.output_shapes or [])[:3] if s]
    else:
        qkv = [s for s in (op.input_shapes or [])[:3] if s]
        # An fx node lists each input node once: self-attention on one tensor has fewer shapes.
        while qkv and len(qkv) < 3:
            qkv.append(qkv[-1])
    if len(qkv) < 3 or any(len(s) < 2 for s in qkv):
        return None
    q, k, v = qkv
    length, e, keys, ev = q[-2], q[-1], k[-2], v[-1]
    if not (length and e and keys and ev):
        return None
    scores = _numel(q) // (length * e) * length * keys  # BH·L·S
    if norm in ATTENTION_BACKWARD:
        return 2 * scores * (3 * e + 2 * ev) + 5 * scores
    return 2 * scores * (e + ev) + 4 * scores


def op_cost(graph: Graph, op: Op) -> Cost | None:
    """FLOPs and bytes moved by a compute op, or ``None`` if its type is unknown.

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
    norm = normalise(op.op_type)
    mirrored = norm.endswith("grad") and op.name.endswith("/grad") and op.name[:-5] in graph
    if mirrored:  # ONNX's synthesised backward: twice its forward op (see importers.onnx_importer)
        fwd = op_cost(graph, graph.op(op.name[:-5]))
        return None if fwd is None else Cost(2 * fwd.flops, 2 * fwd.bytes)
    moved = _tensor_bytes(op.input_shapes, op.dtypes) + _tensor_bytes(op.output_shapes, op.dtypes)
    if not op.input_shapes:  # modules own their weights: count the parameters they read
        moved += sum(graph.op(p).bytes for p in graph.predecessors(op.name) if graph.op(p).kind == "recv")
    if norm in FREE:
        return Cost(0.0, 0.0)
    if norm in COPY:
        return Cost(0.0, moved)
    if norm in CONV:
        macs = _conv_macs(graph, op, norm)
        if macs is None:
            return None
        return Cost(2 * macs * (2 if norm in DOUBLE else 1), moved)
    if norm in MATMUL:
        macs = _matmul_macs(graph, op, norm)
        return None if macs is None else Cost(2 * macs, moved)
    if norm in ATTENTION or norm in ATTENTION_BACKWARD:
        flops = _attention_flops(op, norm)
        return None if flops is None else Cost(flops, moved)
    if norm in ELEMENTWISE:
        return Cost(ELEMENTWISE[norm] * _out_elems(op), moved)
    if norm in REDUCTION:
        n = sum(_numel(s) for s in (op.input_shapes or op.output_shapes or []))
        return Cost(REDUCTION[norm] * n, moved)
    if norm in POOL:
        k = op.attrs.get("kernel_shape") or op.attrs.get("kernel_size") or op.attrs.get("ksize") or [1]
        k = k if isinstance(k, (list, tuple)) else [k, k]
        return Cost(_out_elems(op) * max(1, math.prod(int(x) for x in k)), moved)
    return None


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
