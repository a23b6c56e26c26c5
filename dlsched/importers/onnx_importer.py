"""Import an ONNX model into the common DAG (DESIGN §2).

Mapping
-------
- **Compute ops**: every node of ``graph.node``, in file order, named by
  ``node.name``. A node without a name gets ``<op_type>_<i>`` (``i`` = its
  position in ``graph.node``); a name already taken gets ``_<i>`` appended.
  :func:`node_names` computes these names, and the ONNX profiler uses the same
  function, so oracle rows always match. ``attrs`` keeps the node's scalar and
  list attributes (kernel_shape, strides, pads, group, transB, axis, …).
- **recv ops**: every floating-point initializer consumed by some node, named
  after the initializer, in declaration order. Integer initializers and
  ``Constant`` nodes are constants, not transfers. ONNX has no trainable flag;
  the initializers feeding BatchNormalization's mean/variance inputs (inputs 3
  and 4) are treated as non-trainable state like torch buffers, and become
  transfers only with ``buffers=True``. With that rule the totals of a torch
  export equal torch's ``named_parameters()``. A weight computed from
  constants alone (``ConstantOfShape``, as ONNX's "light" models store every
  weight) is a parameter too (:func:`computed_weights`).
- **Edges**: data dependencies through tensor names (producer → consumer) and
  recv → consumers. An op that only re-lays one initializer (``Transpose``,
  ``Cast``, ``Reshape``… of a weight, as exporters emit for Linear layers)
  merges into its recv, as in the torch importer
  (:func:`dlsched.dag.fold_parameter_views`); its time is not modelled.
  Graph inputs are not ops. A control-flow node (``If``,
  ``Loop``, ``Scan``) is one op; tensors its subgraphs read from the outer
  scope count as its inputs.
- **Training**: a mirrored backward is synthesised. Each forward compute op
  ``f`` gets ``f/grad`` (op_type ``<type>Grad``, phase ``backward``) with an
  edge ``f → f/grad`` (backward reads the forward activations) and, for every
  forward edge ``u → v`` between compute ops, ``v/grad → u/grad``. A
  parameter's gradient comes from the ``/grad`` op of its single consumer, or
  from a new ``<param>/grad_accum`` (op_type ``Sum``) summing the ``/grad`` ops
  of several consumers; then one ``send`` per parameter follows.
  *Cost assumption*: a backward op costs 2× its forward op (gradients with
  respect to the input and to the weights each cost about one forward), and
  an accumulation costs an element-wise sum (see
  :mod:`dlsched.profiling.onnx_profiler`).

Shapes come from ``onnx.shape_inference.infer_shapes`` (with data
propagation, and the shape arithmetic it skips evaluated by
:mod:`dlsched.importers.onnx_fold`); ``batch`` replaces dimension 0 of every
graph input, symbolic or fixed, before inference. Inference runs on a copy
whose floating-point initializers are replaced by typed graph inputs, so a
500 MiB model is not serialised again. Unknown dimensions are ``None``.
"""
from __future__ import annotations

import re
from pathlib import Path

from dlsched.dag import COMPUTE, RECV, Graph, add_gradient_sends, dtype_size, fold_parameter_views
from dlsched.errors import GraphError, ImportFailure

from .onnx_fold import fold_shape_arithmetic

# ONNX TensorProto.DataType → (dtype name, bytes per element)
DTYPES = {
    1: ("float32", 4), 2: ("uint8", 1), 3: ("int8", 1), 4: ("uint16", 2), 5: ("int16", 2),
    6: ("int32", 4), 7: ("int64", 8), 8: ("string", 0), 9: ("bool", 1), 10: ("float16", 2),
    11: ("float64", 8), 12: ("uint32", 4), 13: ("uint64", 8), 14: ("complex64", 8),
    15: ("complex128", 16), 16: ("bfloat16", 2), 17: ("float8e4m3fn", 1), 18: ("float8e4m3fnuz", 1),
    19: ("float8e5m2", 1), 20: ("float8e5m2fnuz", 1), 21: ("uint4", 1), 22: ("int4", 1),
    23: ("float4e2m1", 1),
}
FLOAT_TYPES = frozenset({1, 10, 11, 16, 17, 18, 19, 20, 23})
_FLOAT_NAMES = frozenset(DTYPES[t][0] for t in FLOAT_TYPES)
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
BN_STAT_INPUTS = (3, 4)  # BatchNormalization: X, scale, B, input_mean, input_var


def node_names(nodes) -> list[str]:
    """The DAG names of ONNX ``nodes``: ``node.name``, made non-empty and unique.

    An empty name becomes ``<op_type>_<i>``; a repeated one gets ``_<i>``
    appended (``i`` = position in the list, further ``_`` if still taken).

    Examples
    --------
    >>> from onnx import helper
    >>> node_names([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"], name="r")])
    ['Relu_0', 'r']
    """
    taken = {n.name for n in nodes if n.name}
    seen: set[str] = set()
    out = []
    for i, n in enumerate(nodes):
        name = n.name
        if not name or name in seen:
            name = f"{name}_{i}" if name else f"{n.op_type}_{i}"
            while name in seen or name in taken and name != n.name:
                name += "_"
        seen.add(name)
        out.append(name)
    return out


def _attr_value(attr):
    """A JSON-able value for an attribute, or ``None`` to skip it (tensors, graphs, long lists)."""
    from onnx import AttributeProto as A

    t = attr.type
    if t == A.INT:
        return int(attr.i)
    if t == A.FLOAT:
        f = float(attr.f)
        return f if f == f and abs(f) != float("inf") else str(f)
    if t == A.STRING:
        return attr.s.decode("utf-8", "replace")
    if t == A.INTS and len(attr.ints) <= 64:
        return [int(v) for v in attr.ints]
    if t == A.FLOATS and len(attr.floats) <= 64:
        return [float(v) for v in attr.floats]
    if t == A.STRINGS and len(attr.strings) <= 64:
        return [s.decode("utf-8", "replace") for s in attr.strings]
    return None


def _outer_names(graph_proto) -> set[str]:
    """Tensor names a subgraph reads from its enclosing scope."""
    defined = {i.name for i in graph_proto.input} | {t.name for t in graph_proto.initializer}
    used: set[str] = set()
    for n in graph_proto.node:
        used.update(x for x in n.input if x)
        defined.update(n.output)
        for sub in _subgraphs(n):
            used |= _outer_names(sub)
    return used - defined


def _subgraphs(node) -> list:
    from onnx import AttributeProto as A

    return [s for a in node.attribute if a.type in (A.GRAPH, A.GRAPHS)
            for s in ([a.g] if a.type == A.GRAPH else list(a.graphs))]


def _node_inputs(node) -> list[str]:
    """The tensors a node reads, including outer-scope tensors its subgraphs read."""
    inputs = [x for x in node.input if x]
    subs = _subgraphs(node) if node.op_type in CONTROL_FLOW or node.domain else []
    if subs:
        extra = set()
        for sub in subs:
            extra |= _outer_names(sub)
        inputs += sorted(extra - set(inputs))
    return inputs


def _shape_of(type_proto):
    """(dims, dtype name) of a tensor TypeProto; dims ``None`` when the rank is unknown."""
    tt = type_proto.tensor_type
    dtype = DTYPES.get(tt.elem_type, ("unknown", 4))[0] if tt.elem_type else None
    if not tt.HasField("shape"):
        return None, dtype
    dims = [int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim]
    return dims, dtype


def _load(path: Path):
    import onnx
    from google.protobuf.message import DecodeError

    if not path.exists():
        raise ImportFailure(f"{path}: no such file")
    if path.is_dir():
        raise ImportFailure(f"{path}: is a folder, not an ONNX file")
    try:
        model = onnx.load(str(path))
    except DecodeError as e:
        raise ImportFailure(f"{path}: not a valid ONNX model; the protobuf does not parse "
                            f"(truncated or corrupt file?): {e}") from None
    except (OSError, ValueError, RuntimeError, onnx.checker.ValidationError) as e:
        raise ImportFailure(f"{path}: cannot read the ONNX model: {e}") from None
    if not model.HasField("graph") or not model.graph.node:
        raise ImportFailure(f"{path}: the ONNX model has no graph nodes (empty, truncated or not an ONNX file)")
    return model


def _infer(model, path: Path, batch: int | None) -> dict:
    """Shape inference on a light copy: tensor name → (dims, dtype)."""
    import onnx
    from onnx import helper

    g = model.graph
    light = onnx.ModelProto()
    light.ir_version = max(model.ir_version, 4)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    lg = light.graph
    lg.name = g.name
    lg.node.extend(g.node)
    init_names = {t.name for t in g.initializer}
    real_inputs = [i for i in g.input if i.name not in init_names]
    for t in g.initializer:
        if t.data_type in FLOAT_TYPES or t.data_location == onnx.TensorProto.EXTERNAL:
            # Only the type matters for inference; skip copying the weights.
            lg.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            lg.initializer.append(t)  # small integer tensors drive Reshape/Slice data propagation
    for vi in real_inputs:
        new = lg.input.add()
        new.CopyFrom(vi)
        dims = new.type.tensor_type.shape.dim
        if batch is not None and new.type.HasField("tensor_type") and len(dims):
            dims[0].Clear()
            dims[0].dim_value = batch
    for o in g.output:
        new = lg.output.add()
        new.CopyFrom(o)
        if batch is not None:  # a stale fixed batch would conflict with the new one
            new.type.tensor_type.ClearField("shape")
    if batch is None:
        lg.value_info.extend(g.value_info)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
        # Shape arithmetic ONNX's data propagation skips (Where, Equal…): evaluated, then inferred again.
        for _ in range(4):
            if not fold_shape_arithmetic(light, inferred):
                break
            inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # onnx raises several types (InferenceError, RuntimeError, ValidationError)
        raise ImportFailure(f"{path}: ONNX shape inference failed: {e}") from None
    info: dict = {}
    ig = inferred.graph
    for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
        if vi.type.HasField("tensor_type"):
            info[vi.name] = _shape_of(vi.type)
    for t in ig.initializer:
        info[t.name] = ([int(d) for d in t.dims], DTYPES.get(t.data_type, ("unknown", 4))[0])
    return info


# Ops that only re-lay one initializer (an exported Linear's Transpose(weight) → MatMul): part of reading it.
PARAM_VIEWS = {"Transpose", "Cast", "Reshape", "Identity", "Unsqueeze", "Squeeze", "Flatten"}
# Initializers the torch exporters made up while folding constants (TorchScript's onnx::…, dynamo's val_N).
ANONYMOUS = re.compile(r"^onnx::|^val_\d+$")


def _warn_anonymous(path, names: set[str]) -> None:
    """Say when transfers lost their parameter names: priority files then name tensors the hooks do not know."""
    anonymous = sorted(n for n in names if ANONYMOUS.match(n))
    if anonymous:
        import warnings

        from dlsched.errors import DlschedWarning
        warnings.warn(DlschedWarning(
            f"{path}: {len(anonymous)} of {len(names)} transfers have names the exporter made up (e.g. "
            f"{anonymous[0]}): constant folding replaced those parameters (a transposed weight becomes a new "
            "initializer), so the transfers no longer match the model's parameters one to one and a priority "
            "file cannot name them for a hook. Export with torch.onnx.export(..., optimize=False) (the dynamo "
            "exporter) or do_constant_folding=False (dynamo=False) to keep the names."), stacklevel=3)


# Inputs that hold an op's weights: a tensor computed from constants alone that feeds one of these is a
# parameter stored in another form (ONNX's "light" models build every weight with ConstantOfShape).
WEIGHT_INPUTS = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (1, 2), "MatMul": (1,), "PRelu": (1,),
    "BatchNormalization": (1, 2), "InstanceNormalization": (1, 2), "LayerNormalization": (1, 2),
    "GroupNormalization": (1, 2), "LSTM": (1, 2, 3), "GRU": (1, 2, 3), "RNN": (1, 2, 3), "Gather": (0,),
}


def computed_weights(nodes, inputs: list[list[str]], initializers: set[str], info: dict,
                     buffers: bool) -> tuple[dict[str, int], set[int]]:
    """Weights computed from constants alone: ``({tensor: node index producing it}, {node indices to drop})``.

    A floating-point tensor that no initializer and no graph input reaches,
    made by at least one node other than ``Constant`` (``ConstantOfShape``,
    a random fill, arithmetic on constants) or held by a ``Constant`` node,
    and read as a weight (:data:`WEIGHT_INPUTS`) is a parameter: it becomes a
    recv, and the nodes that build it (and nothing else) go, as an
    initializer's storage is not an op; so do the builders of
    BatchNormalization's statistics, which are transfers only with ``buffers``.

    Examples
    --------
    >>> from onnx import helper, TensorProto
    >>> shape = helper.make_node("Constant", [], ["s"], value=helper.make_tensor("v", TensorProto.INT64, [2], [4, 3]))
    >>> fill = helper.make_node("ConstantOfShape", ["s"], ["w"])
    >>> mm = helper.make_node("MatMul", ["x", "w"], ["y"])
    >>> computed_weights([shape, fill, mm], [[], ["s"], ["x", "w"]], set(), {"w": ([4, 3], "float32")}, False)
    ({'w': 1}, {0, 1})
    """
    constant: dict[str, bool] = {}  # constant tensor → made by a node other than Constant (or through one)
    producer: dict[str, int] = {}
    const_nodes: set[int] = set()
    for i, node in enumerate(nodes):
        if node.op_type in CONTROL_FLOW or not all(x in constant for x in inputs[i]):
            continue
        const_nodes.add(i)
        built = node.op_type != "Constant" or any(constant[x] for x in inputs[i])
        for out in node.output:
            if out:
                constant[out], producer[out] = built, i
    weights: dict[str, int] = {}
    state: set[str] = set()  # BatchNormalization's statistics without --buffers: stored, not transferred
    for i, node in enumerate(nodes):
        if i in const_nodes:
            continue
        stats = BN_STAT_INPUTS if node.op_type == "BatchNormalization" else ()
        for k in WEIGHT_INPUTS.get(node.op_type, ()) + stats:
            x = node.input[k] if k < len(node.input) else ""
            if x in producer and x not in initializers and info.get(x, (None, None))[1] in _FLOAT_NAMES:
                if k in stats and not buffers:
                    state.add(x)
                else:
                    weights[x] = producer[x]
    # The builders of a weight go when everything they make feeds weights or other builders that go.
    readers: dict[str, set[int]] = {}
    for i, ins in enumerate(inputs):
        for x in ins:
            readers.setdefault(x, set()).add(i)
    drop: set[int] = set()
    for i in sorted(const_nodes, reverse=True):
        outs = [o for o in nodes[i].output if o]
        if outs and all(o in weights or o in state or readers.get(o, set()) <= drop and readers.get(o)
                        for o in outs):
            drop.add(i)
    return weights, drop


def exporter_folding(model) -> dict | None:
    """What torch's dynamo exporter folded away, from the provenance it writes on each node.

    ``torch.onnx.export`` (dynamo, the default in torch 2.13) optimises the
    graph: in eval mode BatchNorm goes into the convolutions, so the file holds
    fewer parameters than the module. Each node records the rewrite rules
    applied to it and the fx node it came from, whose ``%p_…`` arguments name
    the module's parameters. Those the file no longer holds are what was
    folded: ``{"parameters": n, "rules": {rule: nodes}}``, or ``None`` for a
    file without such records.
    """
    rules: dict[str, int] = {}
    named: set[str] = set()
    for node in model.graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        for rule in filter(None, (r.strip() for r in meta.get("pkg.onnxscript.rewriter.rule_name", "").split(","))):
            rules[rule] = rules.get(rule, 0) + 1
        named |= {p.lower() for p in re.findall(r"%p_(\w+)", meta.get("pkg.torch.onnx.fx_node", ""))}
    held = {re.sub(r"\W", "_", t.name).lower() for t in model.graph.initializer}  # the fx names are lower case
    folded = named - held
    if not folded:
        return None
    return {"parameters": len(folded), "rules": dict(sorted(rules.items(), key=lambda kv: -kv[1]))}


def import_onnx(path, mode: str = "inference", batch: int | None = None, buffers: bool = False) -> Graph:
    """Import the ONNX model at ``path`` into a :class:`~dlsched.dag.Graph`.

    Parameters
    ----------
    path : str or Path
        An ``.onnx`` file.
    mode : {"inference", "training"}
        ``training`` adds the mirrored backward and one send per parameter
        (see the module docstring).
    batch : int, optional
        Replaces dimension 0 of every graph input before shape inference.
    buffers : bool
        Also make the BatchNormalization mean/variance initializers recv ops.

    Returns
    -------
    Graph
        Named after the file stem; ``source = {"format": "onnx", "path", "batch"}``.

    Raises
    ------
    ImportFailure
        Missing, truncated or corrupt file; failed shape inference; a tensor
        produced twice; a cycle (the :meth:`Graph.validate` message, with the file).

    Examples
    --------
    >>> g = import_onnx(".cache/models/resnet50.onnx", batch=8)   # doctest: +SKIP
    >>> g.param_count                                              # doctest: +SKIP
    25557032
    """
    path = Path(path)
    if mode not in ("inference", "training"):
        raise ImportFailure(f"unknown mode {mode!r}; expected inference or training")
    model = _load(path)
    info = _infer(model, path, batch)
    g = model.graph
    nodes = list(g.node)
    names = node_names(nodes)
    inputs = [_node_inputs(n) for n in nodes]

    consumed: set[str] = set()
    for ins in inputs:
        consumed.update(ins)
    bn_stats = {n.input[i] for n in nodes if n.op_type == "BatchNormalization"
                for i in BN_STAT_INPUTS if len(n.input) > i}

    graph = Graph(path.stem, mode, {"format": "onnx", "path": str(path), "batch": batch})
    folded = exporter_folding(model)
    if folded:
        graph.source["exporter_folded"] = folded
    tensor_src: dict[str, str] = {}  # tensor name → op producing it (recv or compute)
    for t in g.initializer:
        if t.data_type not in FLOAT_TYPES or t.name not in consumed or t.name in tensor_src:
            continue
        if t.name in bn_stats and not buffers:
            continue
        dtype, size = DTYPES[t.data_type]
        numel = 1
        for d in t.dims:
            numel *= int(d)
        graph.add_op(t.name, RECV, op_type="Recv", bytes=numel * size, params=numel,
                     shape=[int(d) for d in t.dims], dtypes=[dtype])
        tensor_src[t.name] = t.name
    weights, built = computed_weights(nodes, inputs, {t.name for t in g.initializer}, info, buffers)
    for w in weights:
        if w in tensor_src:
            continue
        dims, dtype = info[w]
        if dims is None or any(d is None for d in dims):
            raise ImportFailure(f"{path}: weight {w!r} is computed from constants (by {names[weights[w]]!r}, "
                                f"{nodes[weights[w]].op_type}) and its shape {dims} is not known, so its size "
                                "cannot be told; every figure would be for a model without it. Store the weights "
                                "as initializers (torch.onnx.export does), or give the shape as a constant")
        numel = 1
        for d in dims:
            numel *= int(d)
        graph.add_op(w, RECV, op_type="Recv", bytes=numel * dtype_size(dtype), params=numel, shape=list(dims),
                     dtypes=[dtype], attrs={"computed_by": nodes[weights[w]].op_type})
        tensor_src[w] = w
    recv_names = set(tensor_src)
    _warn_anonymous(path, recv_names)

    for i, node in enumerate(nodes):
        if i in built:
            continue
        for out in node.output:
            if not out:
                continue
            if out in tensor_src:
                raise ImportFailure(f"{path}: tensor {out!r} is produced twice (by {tensor_src[out]!r} and "
                                    f"{names[i]!r}); not a valid ONNX graph")
            tensor_src[out] = names[i]
    taken = set(recv_names)
    for i, node in enumerate(nodes):
        if i in built:
            continue
        name = names[i]
        if name in taken:
            raise ImportFailure(f"{path}: node name {name!r} is also an initializer name; cannot tell them apart")
        taken.add(name)
        attrs = {}
        for a in node.attribute:
            v = _attr_value(a)
            if v is not None:
                attrs[a.name] = v
        out_info = [info.get(o, (None, None)) for o in node.output]
        graph.add_op(
            name, COMPUTE, op_type=node.op_type, attrs=attrs,
            output_shapes=[s for s, _ in out_info],
            input_shapes=[info.get(x, (None, None))[0] for x in node.input],
            dtypes=[d for _, d in out_info],
        )
    for i, ins in enumerate(inputs):
        if i in built:
            continue
        for x in ins:
            src = tensor_src.get(x)
            if src is not None:
                graph.add_edge(src, names[i])
    try:
        graph.validate()
    except GraphError as e:
        raise ImportFailure(f"{path}: {e}") from None
    if fold_parameter_views(graph, PARAM_VIEWS, {"Constant"}):
        graph.renumber()
    if mode == "training":
        _mirror_backward(graph, [n for n in names if n in graph], recv_names)
    return graph


def _mirror_backward(graph: Graph, forward: list[str], recv_names: set[str]) -> None:
    """Add ``f/grad`` ops in reverse forward order, accumulations, and the gradient sends."""
    nxg = graph.nx
    forward_edges = [(u, v) for u, v in nxg.edges() if u not in recv_names]
    consumers = {r: sorted(nxg.successors(r), key=lambda n: graph.op(n).index) for r in recv_names}
    taken = set(nxg.nodes)
    grad = {}
    for f in forward:
        g = f"{f}/grad"
        while g in taken:
            g += "_"
        taken.add(g)
        grad[f] = g
    for f in reversed(forward):
        op = graph.op(f)
        graph.add_op(grad[f], COMPUTE, op_type=f"{op.op_type}Grad", phase="backward",
                     output_shapes=list(op.input_shapes), attrs={**op.attrs, "forward": f})
        graph.add_edge(f, grad[f])
    for u, v in forward_edges:
        graph.add_edge(grad[v], grad[u])
    producers = {}
    for recv in graph.recvs():
        users = consumers[recv.name]
        if len(users) == 1:
            producers[recv.name] = grad[users[0]]
            continue
        acc = f"{recv.name}/grad_accum"
        graph.add_op(acc, COMPUTE, op_type="Sum", phase="backward", output_shapes=[recv.shape],
                     dtypes=list(recv.dtypes), attrs={"inputs": len(users)})
        for u in users:
            graph.add_edge(grad[u], acc)
        producers[recv.name] = acc
    add_gradient_sends(graph, producers)
