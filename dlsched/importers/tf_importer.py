"""TensorFlow importers: a GraphDef (``.pb``/``.pbtxt``) or a SavedModel → the common DAG.

DESIGN §2. Parameters become recv ops named after the variable:

- TF1 ``VariableV2`` (or ``Variable``): the ``…/read`` Identity (any Identity
  reading the variable directly) merges into the recv, so its consumers depend
  on the recv.
- TF2 ``VarHandleOp`` or a resource ``Placeholder`` (a tf.function's captured
  variable): the ``ReadVariableOp`` merges into the recv. A resource placeholder
  keeps its node name; for a SavedModel the importer maps each captured handle
  back to its ``tf.Variable`` and names the recv after it (``conv1_conv/kernel``).
  ``examples/build_keras.py`` writes GraphDefs whose variables are already
  ``VarHandleOp`` nodes named after their paths.
- Frozen graphs (no variables): floating-point ``Const`` tensors of rank ≥ 1
  (``frozen_consts=True``).

Recvs come in declaration (GraphDef) order; for a SavedModel, in the order the
serving function captures them (first use), the only order it records. Initialisers, ``Assign*``, save and
restore machinery, and whatever only feeds them, are dropped. The remaining
nodes are compute ops in GraphDef order, named by node name, with ``op_type``
the TF op, shapes and dtypes from importing the graph into a ``tf.Graph`` (so
``batch`` re-infers them), a few JSON-able ``attrs`` (strides, padding, …), and
data and control (``^name``) edges.

Training mode uses TF's real backward: the graph is imported into a
``tf.Graph``, a loss ``Σ_outputs mean(y²)`` over the floating-point outputs is
added (name scope ``dlsched_loss``), and ``tf.gradients(loss, reads)`` builds the
backward for the **trainable** variables' reads (a ``VarHandleOp`` with
``_trainable: false``, or a SavedModel variable with ``trainable=False``, is
not differentiated; GraphDefs carry no other trainability flag, so every
variable counts as trainable there). The same path serves SavedModels, after
their serving function is inlined into a flat graph. Each trainable variable
gets one send ``<var>/grad`` fed by the op producing its gradient (an ``AddN``
named ``dlsched_grad/<var>`` when the variable is read more than once). Ops the
loss depends on are ``phase="forward"``, the others ``backward``. Backward ops
that neither the loss nor any parameter gradient needs (the input's gradient,
partial gradients towards non-trainable statistics) are pruned: TF never runs
them. Non-trainable
state (BatchNorm moving statistics) is read (a recv) but has no send.

A ``tf.custom_gradient`` (Keras's swish) is an IdentityN whose ``_gradient_op_type``
names a Python function of the process that traced it. A SavedModel keeps the
function: its body joins the backward, its captured forward tensors mapped to their
inlined copies. A GraphDef does not: the backward differentiates the ops the
IdentityN wraps, with a warning. The ``Identity`` that ``tf.custom_gradient``
leaves unread beside each use is not an output (nor a loss term), and a
SavedModel's captured constants are ``Const`` ops, not fed inputs.

Examples
--------
>>> g = import_graphdef(".cache/models/resnet50.pb", batch=8)   # doctest: +SKIP
>>> len(g.recvs()), g.param_count                              # doctest: +SKIP
(320, 25636712)
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dlsched.dag import COMPUTE, RECV, Graph, add_gradient_sends, dtype_size, fold_parameter_views
from dlsched.errors import ImportFailure

REF_VARIABLE_OPS = {"VariableV2", "Variable"}
RESOURCE_VARIABLE_OPS = {"VarHandleOp"}
# Ops that only initialise, save or restore state; they and what only feeds them are dropped.
MACHINERY_OPS = {
    "Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "SaveV2", "Save", "SaveSlices", "RestoreV2", "Restore", "RestoreSlice", "MergeV2Checkpoints",
    "ShardedFilename", "ShardedFilespec", "VarIsInitializedOp", "IsVariableInitialized",
    "DestroyResourceOp",
}
ATTR_KEYS = ("strides", "padding", "data_format", "ksize", "dilations", "explicit_paddings",
             "transpose_a", "transpose_b", "adj_x", "adj_y", "epsilon", "is_training", "keep_dims",
             "align_corners", "half_pixel_centers")
FLOAT_DTYPES = {"float16", "bfloat16", "float32", "float64"}
LOSS_SCOPE = "dlsched_loss"
GRAD_SCOPE = "dlsched_grad"


@dataclass
class Variable:
    """A parameter of a TF graph: its node, recv name, shape, dtype and read nodes."""

    node: str
    name: str
    kind: str  # "ref", "resource" or "const"
    shape: list | None
    dtype: str
    trainable: bool = True
    reads: list = field(default_factory=list)
    aliases: list = field(default_factory=list)  # resource Identity nodes forwarding the handle (inlining)


@dataclass
class PreparedGraph:
    """A flat GraphDef ready to convert or to run, with what the importer found in it.

    ``graph_def`` has every variable as a ``VariableV2``/``VarHandleOp`` node (or
    a ``Const`` for frozen graphs), the batch applied, and, in training mode,
    the loss and gradient nodes. ``gradients`` maps a variable's recv name to
    the node producing its gradient.
    """

    graph_def: object
    name: str
    fmt: str
    path: str
    mode: str
    batch: int | None
    variables: list
    kept: list  # compute node names, GraphDef order
    inputs: list  # fed placeholder node names
    outputs: list  # forward output node names
    loss: str | None = None
    gradients: dict = field(default_factory=dict)


def _tf():
    """TensorFlow, imported quietly the first time.

    Its start-up lines (the oneDNN notice, absl's "before InitializeLog"
    warning) are written by C++ before ``TF_CPP_MIN_LOG_LEVEL`` applies, so
    the import runs with file descriptor 2 pointed at /dev/null.
    """
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 2)
            import tensorflow  # noqa: F401
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    import tensorflow as tf

    return tf


def _split_input(inp: str) -> tuple[str, bool]:
    ctrl = inp.startswith("^")
    return inp.lstrip("^").split(":")[0], ctrl


def _dtype_name(enum: int) -> str:
    tf = _tf()
    return tf.dtypes.as_dtype(enum).base_dtype.name


# -- reading files ----------------------------------------------------------------

def read_graphdef(path: str | Path):
    """Parse a binary ``.pb`` or text ``.pbtxt`` GraphDef.

    Raises
    ------
    ImportFailure
        Missing or unparsable file, or a file holding no graph nodes.
    """
    path = Path(path)
    if not path.is_file():
        raise ImportFailure(f"{path}: no such GraphDef file")
    tf = _tf()
    gd = tf.compat.v1.GraphDef()
    data = path.read_bytes()
    try:
        if path.suffix == ".pbtxt":
            from google.protobuf import text_format

            text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
    except Exception as e:  # DecodeError, ParseError, UnicodeDecodeError
        kind = "text-format" if path.suffix == ".pbtxt" else "binary"
        raise ImportFailure(f"{path}: not a valid {kind} TensorFlow GraphDef; the protobuf does not parse "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'})") from None
    if not gd.node or any(not n.name or not n.op for n in gd.node):
        raise ImportFailure(f"{path}: not a TensorFlow GraphDef (it parses, but holds no valid graph nodes)")
    return gd


def resource_placeholders_to_variables(graph_def, variables: dict[str, tuple]):
    """Turn resource placeholders into ``VarHandleOp`` nodes named after their variables.

    Parameters
    ----------
    graph_def : GraphDef
    variables : dict
        Placeholder node name → ``(variable name, shape list or None, dtype enum, trainable)``.

    Returns
    -------
    GraphDef
        A new graph: the variable nodes first, in ``variables`` order, then the
        other nodes with their inputs renamed.
    """
    tf = _tf()
    rename = {ph: spec[0] for ph, spec in variables.items()}
    others = {n.name for n in graph_def.node if n.name not in rename}
    clash = sorted(set(rename.values()) & others)
    if len(set(rename.values())) != len(rename) or clash:
        # Keep placeholder names where variable names are ambiguous or collide.
        rename = {ph: (ph if spec[0] in others or list(rename.values()).count(spec[0]) > 1 else spec[0])
                  for ph, spec in variables.items()}
    by_name = {n.name: n for n in graph_def.node}
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for ph, (_, shape, dtype, trainable) in variables.items():
        node = out.node.add()
        node.name = rename[ph]
        node.op = "VarHandleOp"
        node.device = by_name[ph].device
        node.attr["dtype"].type = dtype
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(shape).as_proto())
        node.attr["container"].s = b""
        node.attr["shared_name"].s = rename[ph].encode()
        node.attr["_trainable"].b = bool(trainable)
    for n in graph_def.node:
        if n.name in rename:
            continue
        new = out.node.add()
        new.CopyFrom(n)
        for i, inp in enumerate(n.input):
            base, ctrl = _split_input(inp)
            if base in rename:
                new.input[i] = inp.replace(base, rename[base], 1)
        if "_class" in n.attr:  # colocation constraints name nodes too
            locs = [loc.decode() for loc in n.attr["_class"].list.s]
            new.attr["_class"].list.s[:] = [
                (f"loc:@{rename[loc[5:]]}" if loc.startswith("loc:@") and loc[5:] in rename else loc).encode()
                for loc in locs]
    return out


def _shape_from_attr(node, key: str) -> list | None:
    if key not in node.attr:
        return None
    if key == "_output_shapes":
        shapes = node.attr[key].list.shape
        if not shapes:
            return None
        s = shapes[0]
    else:
        s = node.attr[key].shape
    if s.unknown_rank:
        return None
    return [d.size if d.size >= 0 else None for d in s.dim]


def _normalise_resources(gd):
    """Resource placeholders → ``VarHandleOp`` (keeping names); shapes from reads."""
    tf = _tf()
    consumers: dict[str, list] = {}
    for n in gd.node:
        for inp in n.input:
            consumers.setdefault(_split_input(inp)[0], []).append(n)
    specs = {}
    for n in gd.node:
        if n.op == "Placeholder" and n.attr["dtype"].type == tf.resource.as_datatype_enum:
            shape, dtype = None, None
            if "_handle_shapes" in n.attr and n.attr["_handle_shapes"].list.shape:
                s = n.attr["_handle_shapes"].list.shape[0]
                shape = None if s.unknown_rank else [d.size if d.size >= 0 else None for d in s.dim]
            if "_handle_dtypes" in n.attr and n.attr["_handle_dtypes"].list.type:
                dtype = n.attr["_handle_dtypes"].list.type[0]
            for c in consumers.get(n.name, []):
                if c.op == "ReadVariableOp":
                    dtype = dtype or c.attr["dtype"].type
                    shape = shape or _shape_from_attr(c, "_output_shapes")
            specs[n.name] = (n.name, shape, dtype or tf.float32.as_datatype_enum, True)
    if not specs:
        return gd
    return resource_placeholders_to_variables(gd, specs)


def _flatten_saved_model(path: Path):
    """Inline a SavedModel's serving function into a flat GraphDef with named variables.

    Returns the GraphDef and the custom-gradient types that loading the SavedModel registered
    (:func:`_saved_gradient`).
    """
    if not path.is_dir() or not any((path / f).is_file() for f in ("saved_model.pb", "saved_model.pbtxt")):
        raise ImportFailure(f"{path}: not a TensorFlow SavedModel folder (no saved_model.pb or saved_model.pbtxt "
                            "in it); pass a SavedModel directory, a .pb/.pbtxt GraphDef, .onnx or .dag.json")
    tf = _tf()
    from tensorflow.python.framework import ops as tf_ops

    registered = set(tf_ops.gradient_registry.list())
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as e:
        raise ImportFailure(f"{path}: TensorFlow cannot load this SavedModel ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''})") from None
    sigs = dict(loaded.signatures)
    if "serving_default" in sigs:
        fn = sigs["serving_default"]
    elif len(sigs) == 1:
        fn = next(iter(sigs.values()))
    else:
        raise ImportFailure(f"{path}: the SavedModel has {'no' if not sigs else len(sigs)} signatures "
                            f"({', '.join(sigs) or 'none'}) and none is serving_default; save it with a "
                            "serving_default signature")
    try:
        from tensorflow.python.framework import convert_to_constants

        gd = convert_to_constants._run_inline_graph_optimization(fn, False, True)
    except Exception:  # private API moved: fall back to the un-inlined graph
        gd = fn.graph.as_graph_def()
    by_handle = {id(v.handle): v for v in fn.variables}
    order = {id(v): i for i, v in enumerate(fn.variables)}
    captured = [(internal.op.name, by_handle[id(external)]) for external, internal in fn.graph.captures
                if id(external) in by_handle]
    captured.sort(key=lambda pv: order[id(pv[1])])  # the function's variable order (first use)
    specs = {ph: (var.name.split(":")[0], var.shape.as_list(), var.dtype.as_datatype_enum, bool(var.trainable))
             for ph, var in captured}
    # A captured constant (Keras Normalization's mean and variance) is a placeholder in the function's
    # graph, but nobody feeds it: it becomes the Const it stands for.
    placeholders = {n.name: n for n in gd.node if n.op == "Placeholder"}
    for external, internal in fn.graph.captures:
        node = placeholders.get(internal.op.name)
        if node is not None and isinstance(external, tf_ops.EagerTensor) and external.dtype != tf.resource:
            node.op = "Const"
            node.ClearField("attr")
            node.attr["dtype"].type = external.dtype.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(external.numpy()))
    kinds = frozenset(k.encode() for k in set(tf_ops.gradient_registry.list()) - registered)
    return resource_placeholders_to_variables(gd, specs), kinds


# -- analysing the graph ------------------------------------------------------------

def _set_batch(gd, batch: int | None) -> None:
    tf = _tf()
    for n in gd.node:
        if "_output_shapes" in n.attr:
            del n.attr["_output_shapes"]  # stale after a batch change; shapes are re-inferred
        if batch is None or n.op != "Placeholder" or n.attr["dtype"].type == tf.resource.as_datatype_enum:
            continue
        s = n.attr["shape"].shape
        if not s.unknown_rank and len(s.dim) >= 1:
            s.dim[0].size = batch


def _find_variables(gd, frozen_consts: bool) -> dict[str, Variable]:
    tf = _tf()
    found: dict[str, Variable] = {}
    for n in gd.node:
        if n.op in REF_VARIABLE_OPS:
            found[n.name] = Variable(n.name, n.name, "ref", _shape_from_attr(n, "shape"), _dtype_name(n.attr["dtype"].type))
        elif n.op in RESOURCE_VARIABLE_OPS:
            trainable = n.attr["_trainable"].b if "_trainable" in n.attr else True
            found[n.name] = Variable(n.name, n.name, "resource", _shape_from_attr(n, "shape"),
                                     _dtype_name(n.attr["dtype"].type), trainable)
    if not found and frozen_consts:
        for n in gd.node:
            if n.op == "Const":
                t = n.attr["value"].tensor
                dt = tf.dtypes.as_dtype(t.dtype).name
                dims = [d.size for d in t.tensor_shape.dim]
                if dt in FLOAT_DTYPES and len(dims) >= 1:
                    found[n.name] = Variable(n.name, n.name, "const", dims, dt)
    # Inlined functions forward handles through resource Identity nodes: they belong to the variable.
    alias = {name: name for name, v in found.items() if v.kind == "resource"}
    resource_enum = tf.resource.as_datatype_enum
    for n in gd.node:  # GraphDef order; a later pass catches chains listed out of order
        if n.op == "Identity" and n.input and n.attr["T"].type == resource_enum:
            base, ctrl = _split_input(n.input[0])
            if base in alias and not ctrl:
                alias[n.name] = alias[base]
                found[alias[base]].aliases.append(n.name)
    for n in gd.node:
        if n.op in ("Identity", "ReadVariableOp") and n.input:
            base, ctrl = _split_input(n.input[0])
            var = found.get(alias.get(base, base))
            if var is None or ctrl:
                continue
            if (var.kind == "ref" and n.op == "Identity") or (var.kind == "resource" and n.op == "ReadVariableOp") \
                    or (var.kind == "const" and n.op == "Identity" and n.name == f"{var.node}/read"):
                var.reads.append(n.name)
    return found


def _kept_nodes(gd, variables: dict[str, Variable]) -> list[str]:
    """Compute nodes left after dropping init/save machinery (GraphDef order)."""
    import networkx as nx

    names = [n.name for n in gd.node]
    nodes = {n.name: n for n in gd.node}
    protected = set(variables)
    for v in variables.values():
        protected.update(v.reads)
        protected.update(v.aliases)
    dg = nx.DiGraph()
    dg.add_nodes_from(names)
    for n in gd.node:
        for inp in n.input:
            base, _ = _split_input(inp)
            if base in nodes:
                dg.add_edge(base, n.name)
    try:
        order = list(nx.topological_sort(dg))
    except nx.NetworkXUnfeasible:
        order = names  # cycles (control flow loops) are reported by Graph.validate later
    dropped = {n for n in names if nodes[n].op in MACHINERY_OPS}
    changed = True
    while changed:
        changed = False
        for n in order:  # forward: anything waiting on machinery is machinery (init, restore_all)
            if n not in dropped and n not in protected and any(p in dropped for p in dg.predecessors(n)):
                dropped.add(n)
                changed = True
        for n in reversed(order):  # backward: what only feeds machinery is machinery (initialisers)
            succ = list(dg.successors(n))
            if n not in dropped and n not in protected and succ and all(s in dropped for s in succ):
                dropped.add(n)
                changed = True
    return [n for n in names if n not in dropped and n not in protected]


def _gradient_type(op) -> bytes | None:
    """The custom-gradient type an op names in ``_gradient_op_type`` (function calls aside, as in TF)."""
    if op.type in ("StatefulPartitionedCall", "PartitionedCall"):
        return None
    try:
        return op.get_attr("_gradient_op_type") or None
    except ValueError:
        return None


def _gradient_types(graph) -> dict[bytes, list[str]]:
    """Custom-gradient type → the names of the ops carrying it in ``graph``."""
    found: dict[bytes, list[str]] = {}
    for op in graph.get_operations():
        kind = _gradient_type(op)
        if kind:
            found.setdefault(kind, []).append(op.name)
    return found


def _saved_gradient(op, kind: bytes, homes: dict):
    """The gradient that loading a SavedModel registered for custom-gradient ``op``, rebuilt for the flat graph.

    ``tf.saved_model.load`` registers each saved ``tf.custom_gradient`` function under a fresh
    ``_gradient_op_type``, but the function captures forward tensors of the un-inlined function graph
    (``efficientnetb0_1/top_activation_1/beta``), which the flat graph names with the inlining prefix
    (``StatefulPartitionedCall/efficientnetb0_1/…``). The returned gradient imports the function's body
    with its arguments bound to the incoming gradients and its captures to their inlined copies. ``None``
    when there is no such function or a capture has no copy. ``homes`` caches :func:`_gradient_types`.
    """
    import inspect

    tf = _tf()
    from tensorflow.python.framework import ops as tf_ops

    try:  # the registered wrapper is a closure over the loaded ConcreteFunction ``func``
        func = inspect.getclosurevars(tf_ops.gradient_registry.lookup(kind.decode())).nonlocals["func"]
        body, captured, structured = func.graph, list(func.captured_inputs), list(func.structured_outputs)
    except (LookupError, KeyError, AttributeError, TypeError):
        return None
    if len(body.inputs) - len(captured) != len(op.outputs) or len(structured) != len(op.inputs) \
            or sum(o is not None for o in structured) != len(body.outputs):
        return None
    flat_captures = []
    for c in captured:
        # The op with this gradient type in the capture's own graph tells the inlining prefix.
        if id(c.graph) not in homes:
            homes[id(c.graph)] = _gradient_types(c.graph)
        home = homes[id(c.graph)].get(kind, [])
        prefix = op.name[: len(op.name) - len(home[0])] if len(home) == 1 else None
        if prefix is None or not op.name.endswith(home[0]) or prefix[-1:] not in ("", "/"):
            return None
        try:
            flat_captures.append(op.graph.get_tensor_by_name(prefix + c.name))
        except (KeyError, ValueError):
            return None
    graph_def = body.as_graph_def()
    returns = [t.name for t in body.outputs]

    def gradient(_, *grads):
        grads = [gr if gr is not None else tf.zeros_like(t) for gr, t in zip(grads, op.outputs)]
        bound = list(zip(body.inputs, grads + flat_captures))
        input_map = {t.name: v for t, v in bound}
        input_map.update({f"^{t.op.name}": v for t, v in bound})  # ``control_dependencies([dy])``
        outs = iter(tf.graph_util.import_graph_def(graph_def, input_map=input_map, return_elements=returns,
                                                   name="custom_gradient"))
        return [None if o is None else next(outs) for o in structured]

    return gradient


def _bind_custom_gradients(g, saved: frozenset) -> list[str]:
    """Give every op with a custom gradient one this process can build; the names of those left without theirs.

    A ``tf.custom_gradient`` (or ``gradient_override_map``) op names its gradient in the attr
    ``_gradient_op_type``: a key into the Python gradient registry of the process that built the graph,
    which a GraphDef does not carry and which may name another function here. A SavedModel keeps the
    function, registered under one of the types in ``saved`` when it was loaded (:func:`_saved_gradient`).
    Otherwise the op gets its op type's own gradient: for ``tf.custom_gradient``'s IdentityN a
    pass-through, so TF differentiates the ops the custom gradient wraps.
    """
    from tensorflow.python.framework import ops as tf_ops

    plain, homes = [], {}
    for op in g.get_operations():
        kind = _gradient_type(op)
        if not kind or not op.inputs:
            continue
        grad = _saved_gradient(op, kind, homes) if kind in saved else None
        if grad is None:
            plain.append(op.name)
            try:
                grad = _pass_through(op) if op.type == "IdentityN" else tf_ops.gradient_registry.lookup(op.type)
            except LookupError:
                continue  # tf.gradients names the op
        op._gradient_function = grad  # consulted before the registry (ops.get_gradient_function)
    return plain


def _pass_through(op):
    """IdentityN ``op``'s gradient, without the zeros TF feeds in for outputs nothing reads.

    ``tf.custom_gradient``'s IdentityN also forwards its arguments, which nothing reads; TF's own gradient
    would add a ``ZerosLike`` and an ``AddN`` per argument for a gradient that is exactly zero.
    """
    read = [bool(out.consumers()) for out in op.outputs]  # before tf.gradients adds its ZerosLike readers

    def gradient(_, *grads):
        return [g if r else None for g, r in zip(grads, read)]

    return gradient


def _custom_gradient_leftovers(nodes: dict, kept: list[str]) -> set[str]:
    """The unread ``Identity`` that ``tf.custom_gradient`` leaves beside each use in a traced graph.

    TensorFlow takes an ``Identity`` of the custom-gradient result to look for variables
    (``_get_dependent_variables``) and never reads it, while the model reads the result through the
    IdentityN that carries the gradient. Left in, each would be a model output: an extra loss term in
    training, differentiated through the ops the custom gradient replaces. Nothing fetches it, so TF
    never runs it.
    """
    def tensor(inp: str) -> str:
        return inp if ":" in inp else f"{inp}:0"

    forwarded = {tensor(i) for n in kept if nodes[n].op == "IdentityN" and "_gradient_op_type" in nodes[n].attr
                 for i in nodes[n].input if not i.startswith("^")}
    read = {_split_input(i)[0] for n in kept for i in nodes[n].input}
    return {n for n in kept if nodes[n].op == "Identity" and n not in read and nodes[n].input
            and tensor(nodes[n].input[0]) in forwarded}


def _add_training(gd, variables: dict[str, Variable], outputs: list[str], saved=frozenset()):
    """Append a loss and ``tf.gradients`` for the trainable variables' reads.

    ``saved``: the custom-gradient types that loading the graph's SavedModel registered.
    Returns the training GraphDef, the loss node, gradient producers and the custom-gradient ops left
    with their op type's own gradient.
    """
    tf = _tf()
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
        plain = _bind_custom_gradients(g, saved)
        outs = [t for o in outputs for t in g.get_operation_by_name(o).outputs if t.dtype.is_floating]
        if not outs:
            raise ImportFailure("the graph has no floating-point output to build a training loss from")
        with tf.name_scope(LOSS_SCOPE):
            terms = [tf.reduce_mean(tf.square(t)) for t in outs]
            loss = tf.add_n(terms, name="loss") if len(terms) > 1 else tf.identity(terms[0], name="loss")
        train = [v for v in variables.values() if v.trainable]
        reads = []
        for v in train:
            nodes = v.reads if v.kind != "const" else [v.node]
            reads.extend((v, g.get_operation_by_name(r).outputs[0]) for r in nodes)
        grads = tf.gradients(loss, [t for _, t in reads])
        per_var: dict[str, list] = {}
        for (v, _), gr in zip(reads, grads):
            if gr is None:
                continue
            if isinstance(gr, tf.IndexedSlices):
                gr = tf.convert_to_tensor(gr)
            per_var.setdefault(v.name, []).append(gr)
        producers = {}
        for v in train:
            gs = per_var.get(v.name)
            if not gs:
                continue
            t = gs[0] if len(gs) == 1 else tf.add_n(gs, name=f"{GRAD_SCOPE}/{v.name}")
            producers[v.name] = t.op.name
    return g.as_graph_def(), loss.op.name, producers, plain


def _jsonable_attr(a):
    which = a.WhichOneof("value")
    if which == "s":
        return a.s.decode("utf-8", "replace")
    if which in ("i", "f", "b"):
        return getattr(a, which)
    if which == "list":
        for key in ("i", "f", "s", "b"):
            vals = list(getattr(a.list, key))
            if vals:
                return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in vals]
        return []
    return None


def prepare(path: str | Path, fmt: str, mode: str = "inference", batch: int | None = None,
            frozen_consts: bool = True) -> PreparedGraph:
    """Read a GraphDef or SavedModel into a :class:`PreparedGraph` (shared by importer and profiler).

    Parameters
    ----------
    path : path
    fmt : {"graphdef", "savedmodel"}
    mode : {"inference", "training"}
    batch : int, optional
        Replaces the first dimension of every fed placeholder.
    frozen_consts : bool
        Treat floating-point ``Const`` of rank ≥ 1 as parameters when the graph has no variables.

    Raises
    ------
    ImportFailure
    """
    path = Path(path)
    if mode not in ("inference", "training"):
        raise ImportFailure(f"unknown mode {mode!r}; expected inference or training")
    if fmt == "savedmodel":
        gd, saved_gradients = _flatten_saved_model(path)
        name = path.name
    else:
        gd, saved_gradients = _normalise_resources(read_graphdef(path)), frozenset()
        name = path.name[: -len(path.suffix)] if path.suffix else path.name
    _set_batch(gd, batch)
    variables = _find_variables(gd, frozen_consts)
    nodes = {n.name: n for n in gd.node}
    kept = _kept_nodes(gd, variables)
    leftovers = _custom_gradient_leftovers(nodes, kept)
    kept = [n for n in kept if n not in leftovers]
    kept_set = set(kept)
    consumed = set()
    for n in kept:
        for inp in nodes[n].input:
            consumed.add(_split_input(inp)[0])
    outputs = [n for n in kept if n not in consumed and nodes[n].op != "NoOp"]
    tf = _tf()
    inputs = [n for n in kept if nodes[n].op in ("Placeholder", "PlaceholderV2")
              and nodes[n].attr["dtype"].type != tf.resource.as_datatype_enum]
    prepared = PreparedGraph(gd, name, fmt, str(path), mode, batch, list(variables.values()), kept, inputs, outputs)
    if mode == "training":
        try:
            gd2, loss, producers, plain = _add_training(gd, variables, outputs, saved_gradients)
        except ImportFailure as e:
            raise ImportFailure(f"{path}: {e}") from None
        except Exception as e:
            raise ImportFailure(f"{path}: TensorFlow could not build the backward graph "
                                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
        if plain:
            _warn_plain_gradients(path, fmt, plain)
        new = [n.name for n in gd2.node if n.name not in nodes]
        prepared.graph_def = gd2
        prepared.kept = kept + [n for n in new if n not in kept_set]
        prepared.loss, prepared.gradients = loss, producers
    return prepared


def _warn_plain_gradients(path, fmt: str, plain: list[str]) -> None:
    """Say that custom-gradient ops got their op type's own gradient (:func:`_bind_custom_gradients`)."""
    import warnings

    from dlsched.errors import DlschedWarning
    many = f"{len(plain)} ops have" if len(plain) > 1 else "1 op has"
    warnings.warn(DlschedWarning(
        f"{path}: {many} a custom gradient (tf.custom_gradient, e.g. {plain[0]}) whose function the "
        f"{'SavedModel' if fmt == 'savedmodel' else 'GraphDef'} does not hold, so the backward differentiates "
        "the ops it wraps instead: the same values unless the custom gradient changes the math, but possibly "
        "other ops and memory. A SavedModel keeps the function (tf.saved_model.save, unless "
        "experimental_custom_gradients=False)."), stacklevel=4)


def to_dag(prepared: PreparedGraph) -> Graph:
    """Convert a :class:`PreparedGraph` into the common DAG (shapes from a ``tf.Graph``)."""
    tf = _tf()
    gd = prepared.graph_def
    path = prepared.path
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(gd, name="")
    except Exception as e:
        raise ImportFailure(f"{path}: TensorFlow cannot import this graph ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''})") from None
    nodes = {n.name: n for n in gd.node}
    source = {"format": prepared.fmt, "path": path, "batch": prepared.batch}
    graph = Graph(prepared.name, prepared.mode, source)
    owner: dict[str, str] = {}  # variable node / read node → recv name
    for v in prepared.variables:
        shape = v.shape
        if shape is None or any(d is None for d in shape):
            shp = g.get_operation_by_name(v.reads[0]).outputs[0].shape if v.reads else None
            if shp is not None and shp.rank is not None and shp.is_fully_defined():
                shape = shp.as_list()
        count = 1
        for d in shape or []:
            count *= d if d is not None else 0
        if shape is None:
            count = 0
        graph.add_op(v.name, RECV, op_type=nodes[v.node].op, shape=shape, params=count,
                     bytes=count * dtype_size(v.dtype), dtypes=[v.dtype], output_shapes=[shape])
        owner[v.node] = v.name
        for r in v.reads + v.aliases:
            owner[r] = v.name
    # Fed inputs are not ops, as in the torch and ONNX importers: no kernel runs for them.
    fed = set(prepared.inputs)
    kept = set(prepared.kept) - fed
    bridged = {n for n in kept if nodes[n].op == "NoOp"}

    def sources(base: str, seen: set) -> list[str]:
        """Producers of an input; a NoOp is replaced by what it waits for."""
        if base in owner:
            return [owner[base]]
        if base not in kept:
            return []
        if base not in bridged:
            return [base]
        if base in seen:
            return []
        seen.add(base)
        return [s for inp in nodes[base].input for s in sources(_split_input(inp)[0], seen)]

    for name in prepared.kept:
        if name in bridged or name in fed:
            continue  # NoOps only group control dependencies; their consumers inherit them
        node = nodes[name]
        op = g.get_operation_by_name(name)
        out_shapes = [t.shape.as_list() if t.shape.rank is not None else None for t in op.outputs]
        in_shapes = [t.shape.as_list() if t.shape.rank is not None else None for t in op.inputs]
        attrs = {}
        for key in ATTR_KEYS:
            if key in node.attr:
                val = _jsonable_attr(node.attr[key])
                if val is not None:
                    attrs[key] = val
        graph.add_op(name, COMPUTE, op_type=node.op, output_shapes=out_shapes, input_shapes=in_shapes,
                     dtypes=[t.dtype.base_dtype.name for t in op.outputs], attrs=attrs)
    for name in prepared.kept:
        if name in bridged or name in fed:
            continue
        for inp in nodes[name].input:
            for src in sources(_split_input(inp)[0], set()):
                graph.add_edge(src, name)
    if fold_parameter_views(graph, PARAM_VIEWS, {"Const"}):
        graph.renumber()
    if prepared.mode == "training":
        _mark_phases(graph, prepared)
    return graph


# Ops that only re-lay one variable (a Cast for mixed precision, a Transpose or Reshape of a kernel): part of
# reading it, like the …/read Identity (dlsched.dag.fold_parameter_views).
PARAM_VIEWS = {"Identity", "Cast", "Transpose", "Reshape", "ExpandDims", "Squeeze"}


def _mark_phases(graph: Graph, prepared: PreparedGraph) -> None:
    import networkx as nx

    forward = nx.ancestors(graph.nx, prepared.loss) | {prepared.loss}
    for op in graph.compute_ops():
        op.phase = "forward" if op.name in forward else "backward"
    # Non-trainable state has no gradient: read, never sent back.
    add_gradient_sends(graph, prepared.gradients,
                       frozen=[r.name for r in graph.recvs() if r.name not in prepared.gradients])
    # tf.gradients also builds partial gradients nobody fetches (towards the input and
    # non-trainable statistics); TF's executor never runs them, so they leave the DAG.
    needed = {prepared.loss}
    for send in graph.sends():
        needed |= nx.ancestors(graph.nx, send.name)
    needed |= nx.ancestors(graph.nx, prepared.loss)
    for op in list(graph.compute_ops()):
        if op.name not in needed:
            graph.remove_op(op.name)
    graph.renumber()


def import_graphdef(path: str | Path, mode: str = "inference", batch: int | None = None,
                    frozen_consts: bool = True) -> Graph:
    """Import a TensorFlow GraphDef (binary ``.pb`` or text ``.pbtxt``).

    Parameters
    ----------
    path : path
    mode : {"inference", "training"}
    batch : int, optional
        Overrides the (symbolic or fixed) first dimension of the fed placeholders.
    frozen_consts : bool
        For graphs without variables, floating-point ``Const`` of rank ≥ 1 become recvs.

    Returns
    -------
    Graph

    Raises
    ------
    ImportFailure
        Missing or unparsable file, or a graph TensorFlow cannot import.

    Examples
    --------
    >>> g = import_graphdef("tf1_mlp.pbtxt")        # doctest: +SKIP
    >>> [r.name for r in g.recvs()]                 # doctest: +SKIP
    ['dense1/kernel', 'dense1/bias', 'dense2/kernel', 'dense2/bias']
    """
    return to_dag(prepare(path, "graphdef", mode, batch, frozen_consts))


def import_saved_model(path: str | Path, mode: str = "inference", batch: int | None = None) -> Graph:
    """Import a SavedModel folder through its ``serving_default`` (or only) signature.

    The signature's function is inlined into one flat graph; its captured
    variable handles become ``VarHandleOp`` recvs named after the variables.

    Raises
    ------
    ImportFailure
        The folder is not a SavedModel, cannot be loaded, or has no usable signature.
    """
    return to_dag(prepare(path, "savedmodel", mode, batch))
