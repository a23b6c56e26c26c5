"""PyTorch importer: a model factory captured with torch.fx becomes the common DAG.

MODEL is a factory spec, ``path/to/file.py:fn`` or ``package.module:fn``, where
``fn()`` returns ``(module, example_inputs)`` (DESIGN §2, §7).

Two captures, recorded in :attr:`dlsched.dag.Graph.capture`:

- ``symbolic_trace``: :func:`torch.fx.symbolic_trace` of the module in
  ``eval()`` mode, shapes from :class:`torch.fx.passes.shape_prop.ShapeProp`.
  Every ``call_module`` / ``call_function`` / ``call_method`` node is a
  compute op named by its fx node name, in fx graph order. Placeholders,
  ``get_attr`` nodes and the output node are not ops; a parameter's recv
  feeds every call of the module owning it.
- ``make_fx``: :func:`torch.fx.experimental.proxy_tensor.make_fx` of a
  functional call of the module (:func:`torch.func.functional_call`), the
  aten-level graph. Parameters and buffers enter as placeholders; a parameter
  placeholder is its recv, and ops that only view one parameter (``t``,
  ``detach``…) merge into that recv (:func:`dlsched.dag.fold_parameter_views`).

Which capture each mode uses:

- ``inference``: ``symbolic_trace`` first, then ``make_fx`` of the forward
  pass in ``eval()`` mode under :func:`torch.no_grad`, with fake tensors.
  Symbolic tracing goes first because on the models it handles (plain
  ``nn.Module`` code: the examples, torchvision-style CNNs) it gives op names
  a user recognises (``layer1_0_conv1``, one op per module call) and keeps
  the fingerprints of DAGs, priority files and CI baselines made before
  ``make_fx`` existed here. It fails on most third-party models (Hugging Face
  BERT, GPT-2, Llama: ``co_varnames is too small``, proxies in control flow
  on shapes or config), and ``make_fx`` captures those: it runs the real
  Python code on fake tensors, so any control flow that depends on shapes
  and configuration only is simply executed. ``make_fx`` also takes over
  when the symbolic graph cannot run the example inputs. Where a kernel has
  no fake-tensor rule (the CPU ``grouped_mm`` of mixture-of-experts layers
  such as Mixtral's accepts only bf16 on fake tensors), real tensors trace
  it, twice, on the example and on other input values: a graph specialised
  to one example's values is not the model, so two traces that differ (control
  flow on tensor values) refuse the import with both reasons.
- ``training``: ``make_fx`` of one functional training step (forward, loss,
  :func:`torch.autograd.grad`) in ``train()`` mode, the joint graph with the
  framework's real backward (fake tensors, then real ones). Every gradient
  feeds one ``send`` op.

Parameters (``named_parameters()``, qualified names like
``layer1.0.conv1.weight``; a tied weight once, under its first name) become
``recv`` ops; with ``buffers=True`` so do floating-point buffers (BatchNorm
running statistics; the integer ``num_batches_tracked`` is bookkeeping, not a
transfer).

:func:`trace_factory` is shared with :mod:`dlsched.profiling.torch_profiler`,
so the importer and the profiler always agree on op names.

Examples
--------
>>> g = import_factory("examples/torch_models.py:small_cnn", batch=2)
>>> g.recvs()[0].name
'conv1.weight'
"""
from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass, field
from typing import Any

from dlsched.dag import COMPUTE, MODES, RECV, Graph, add_gradient_sends, fold_parameter_views
from dlsched.errors import ImportFailure
from dlsched.factory import call_factory, training_loss

CAPTURES = ("symbolic_trace", "make_fx")
# Module attributes a FLOP / memory cost model needs, by module class.
_MODULE_ATTRS = (
    "in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups",
    "in_features", "out_features", "num_features", "normalized_shape", "num_embeddings",
    "embedding_dim", "output_size", "p", "num_heads", "embed_dim",
)


@dataclass
class TracedModel:
    """A factory traced for the DAG (importer) and for timing (profiler).

    Attributes
    ----------
    gm : torch.fx.GraphModule
        The traced module (``symbolic_trace`` graph, or a ``make_fx`` graph
        whose placeholders are parameters, buffers, inputs).
    args : tuple
        The real example arguments ``gm`` runs on.
    op_names : dict
        fx node name → DAG op name, for every node that becomes a DAG op
        (compute nodes, and the placeholders / ``get_attr`` nodes that are
        parameters).
    module : torch.nn.Module
        The factory's module.
    name : str
        The factory function's name (the graph name).
    mode : str
    batch : int or None
    params, buffers : list of (str, torch.Tensor)
        Parameters, and the floating-point buffers that are transfers.
    loss_node : str or None
        training: the DAG name of the op computing the loss.
    grad_nodes : dict
        training: parameter name → DAG name of the op producing its gradient.
    capture : {"symbolic_trace", "make_fx"}
        How ``gm`` was captured (see the module docstring).
    """

    gm: Any
    args: tuple
    op_names: dict
    module: Any
    name: str
    mode: str
    batch: int | None
    params: list = field(default_factory=list)
    buffers: list = field(default_factory=list)
    loss_node: str | None = None
    grad_nodes: dict = field(default_factory=dict)
    capture: str = "symbolic_trace"


# -- tracing --------------------------------------------------------------------
def _float_buffers(module) -> list:
    """Floating-point buffers a server would hold: those in the state dict.

    Non-persistent buffers (``persistent=False``, e.g. Llama's rotary
    ``inv_freq``) are derived constants each worker rebuilds, not transfers.
    """
    derived = {f"{prefix}.{n}" if prefix else n
               for prefix, m in module.named_modules() for n in m._non_persistent_buffers_set}
    return [(n, b) for n, b in module.named_buffers() if b.is_floating_point() and n not in derived]


def trace_factory(spec: str, mode: str = "inference", batch: int | None = None, buffers: bool = False,
                  shapes: bool = True, capture: str | None = None) -> TracedModel:
    """Trace the factory ``spec`` and name its nodes as the DAG does.

    Parameters
    ----------
    spec : str
        ``path/to/file.py:fn`` or ``package.module:fn``.
    mode : {"inference", "training"}
        ``inference``: the forward pass in ``eval()`` mode, ``symbolic_trace``
        first, ``make_fx`` where that fails (see the module docstring).
        ``training``: ``make_fx`` of a functional training step with the module
        in ``train()`` mode (BatchNorm uses batch statistics and updates its
        running statistics, dropout is active), as a real step runs.
    batch : int, optional
        See :func:`call_factory`.
    buffers : bool
        Floating-point buffers are transfers too (their placeholders /
        ``get_attr`` nodes map to recv names).
    shapes : bool
        ``symbolic_trace`` only: run ``ShapeProp`` to record shapes (the
        profiler skips it; ``make_fx`` records shapes while tracing).
    capture : {"symbolic_trace", "make_fx"}, optional
        Use this capture only, e.g. the one recorded in a DAG
        (:attr:`dlsched.dag.Graph.capture`), so the profiler times the graph
        the importer built. Training always uses ``make_fx``.

    Returns
    -------
    TracedModel

    Raises
    ------
    ImportFailure
    """
    if mode not in MODES:
        raise ImportFailure(f"{spec}: unknown mode {mode!r}; expected inference or training")
    if capture is not None and capture not in CAPTURES:
        raise ImportFailure(f"{spec}: unknown capture {capture!r}; expected {' or '.join(CAPTURES)}")
    if mode == "training" and capture == "symbolic_trace":
        raise ImportFailure(f"{spec}: a training graph is captured with make_fx (symbolic_trace has no backward)")
    module, inputs, fn_name = call_factory(spec, batch)
    params = list(module.named_parameters())
    bufs = _float_buffers(module) if buffers else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "inference":
            return _trace_inference(spec, module, inputs, fn_name, batch, params, bufs, shapes, capture)
        return _trace_training(spec, module, inputs, fn_name, batch, params, bufs)


def _unique_name(name: str, taken: set) -> str:
    # Compute ops are named after fx nodes; a top-level parameter (``pos``) could share the name.
    out, k = name, 0
    while out in taken:
        k += 1
        out = f"{name}_op{k if k > 1 else ''}"
    return out


class _CaptureFailed(Exception):
    """One capture could not produce a graph; the message says why (for the user)."""


def _trace_inference(spec, module, inputs, fn_name, batch, params, bufs, shapes, capture) -> TracedModel:
    module.eval()
    symbolic_failure = None
    if capture in (None, "symbolic_trace"):
        try:
            return _symbolic_inference(module, inputs, fn_name, batch, params, bufs, shapes)
        except _CaptureFailed as e:
            if capture == "symbolic_trace":
                raise ImportFailure(f"{spec}: {e}") from None
            symbolic_failure = str(e)
    try:
        return _aten_inference(module, inputs, fn_name, batch, params, bufs)
    except _CaptureFailed as e:
        if symbolic_failure is None:
            raise ImportFailure(f"{spec}: {e}") from None
        raise ImportFailure(f"{spec}: {symbolic_failure}, and {e}. Symbolic tracing needs forward() "
                            "free of control flow on its inputs; make_fx runs forward() on fake tensors, so only "
                            "control flow on tensor values stops it") from None


def _symbolic_inference(module, inputs, fn_name, batch, params, bufs, shapes) -> TracedModel:
    import torch
    from torch.fx.passes.shape_prop import ShapeProp

    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as e:
        raise _CaptureFailed(f"torch.fx could not trace the module ({type(e).__name__}: {e})") from None
    if shapes:
        try:
            # ShapeProp prints a traceback itself before re-raising; keep it off the user's terminal.
            with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
                ShapeProp(gm).propagate(*inputs)
        except Exception as e:
            cause = e.__cause__ or e
            raise _CaptureFailed(f"running the symbolically traced module on the example inputs failed "
                                 f"({type(cause).__name__}: {cause})") from None
    transfer_names = {n for n, _ in params} | {n for n, _ in bufs}
    op_names: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target in transfer_names:
            op_names[node.name] = node.target
    taken = set(transfer_names)
    for node in gm.graph.nodes:
        if node.op in ("call_module", "call_function", "call_method"):
            name = _unique_name(node.name, taken)
            taken.add(name)
            op_names[node.name] = name
    return TracedModel(gm=gm, args=inputs, op_names=op_names, module=module, name=fn_name, mode="inference",
                       batch=batch, params=params, buffers=bufs, capture="symbolic_trace")


def _tensor_outputs(out) -> list:
    """The tensors among a forward pass's outputs (tuples, dicts, ``ModelOutput``s…).

    Other leaves (a Hugging Face ``DynamicCache``, ints) are dropped: make_fx
    can only return tensors, and the ops feeding them are kept anyway.
    """
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    if not leaves:
        raise TypeError(f"the module returns no tensor (got {type(out).__name__})")
    return leaves


def _functional_args(params, all_bufs, inputs, grad: bool) -> tuple:
    """Placeholders of a functional call: parameters, every buffer, then the inputs."""
    return tuple([t.detach().requires_grad_(grad and t.is_floating_point()) for _, t in params]
                 + [t.detach().clone() for _, t in all_bufs] + list(inputs))


def _make_fx(fn, args, tracing_modes, what: str, redraw=None):
    """``make_fx(fn)(*args)`` with the first tracing mode that works, else :class:`_CaptureFailed`.

    A real-tensor trace runs the model's Python on the example's values, so
    control flow on them would specialise the graph to this one example.
    With ``redraw`` (``args → args`` with other input values), a real trace
    is taken again on the redrawn inputs and refused unless it has the same ops.
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    err = None
    for tracing_mode in tracing_modes:
        try:
            with _quiet():
                gm = make_fx(fn, tracing_mode=tracing_mode)(*args)
                if tracing_mode == "real" and redraw is not None \
                        and _signature(make_fx(fn, tracing_mode="real")(*redraw(args))) != _signature(gm):
                    raise _CaptureFailed(f"tracing {what} with real tensors gives other ops for other input "
                                         "values: its control flow depends on them, so no one graph is the model")
            return gm
        except _CaptureFailed:
            raise
        except Exception as e:
            err = e
    # torch's own message runs to several paragraphs of debugging hints; its first line says what failed.
    first = (str(err).strip().splitlines() or [""])[0].strip()
    raise _CaptureFailed(f"make_fx could not trace {what} ({type(err).__name__}: {first})")


@contextlib.contextmanager
def _quiet():
    """A failed trace is handled here: keep torch's own report of it (stderr, and the fake-tensor
    error log, which its logging handler writes to the real stderr) off the user's terminal."""
    import logging

    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(before)


def _signature(gm) -> list[tuple[str, str]]:
    """The ops of a traced graph, in order: what two traces of one model must share."""
    return [(n.op, str(n.target)) for n in gm.graph.nodes if n.op.startswith("call")]


def _redraw_inputs(n_inputs: int):
    """``args → args`` with the last ``n_inputs`` tensors drawn anew: same shapes and dtypes, other values
    (integers within the example's range, as token ids must stay in the vocabulary)."""
    import torch

    def redraw(args):
        g = torch.Generator().manual_seed(12345)
        fresh = []
        for x in args[len(args) - n_inputs:]:
            if x.is_floating_point():
                fresh.append(torch.randn(x.shape, generator=g, dtype=x.dtype) * (x.std() if x.numel() > 1 else 1))
            elif x.dtype == torch.bool:
                fresh.append(torch.rand(x.shape, generator=g) < 0.5)
            else:
                low, high = (int(x.min()), int(x.max()) + 1) if x.numel() else (0, 1)
                fresh.append(torch.randint(low, high, x.shape, generator=g, dtype=x.dtype))
        return tuple(args[:len(args) - n_inputs]) + tuple(fresh)
    return redraw


def _aten_op_names(gm, pnames: list, bnames: list, transfer_bufs: set) -> dict:
    """fx node name → DAG name for a make_fx graph: parameter (and transfer-buffer) placeholders
    are named after them, compute nodes after the fx node."""
    n_p, n_b = len(pnames), len(bnames)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    op_names: dict[str, str] = {}
    for i, node in enumerate(placeholders):
        if i < n_p:
            op_names[node.name] = pnames[i]
        elif i < n_p + n_b and bnames[i - n_p] in transfer_bufs:
            op_names[node.name] = bnames[i - n_p]
    taken = set(pnames) | transfer_bufs
    for node in gm.graph.nodes:
        if node.op in ("call_module", "call_function", "call_method"):
            name = _unique_name(node.name, taken)
            taken.add(name)
            op_names[node.name] = name
    return op_names


def _aten_inference(module, inputs, fn_name, batch, params, bufs) -> TracedModel:
    import torch

    all_bufs = list(module.named_buffers())
    pnames = [n for n, _ in params]
    bnames = [n for n, _ in all_bufs]
    n_state = len(pnames) + len(bnames)

    def forward(*flat):
        state = dict(zip(pnames + bnames, flat[:n_state]))
        return _tensor_outputs(torch.func.functional_call(module, state, tuple(flat[n_state:])))

    args = _functional_args(params, all_bufs, inputs, grad=False)
    # no_grad: the graph a served model runs, without the detach ops autograd would record. Real tensors
    # where a kernel has no fake-tensor rule (CPU grouped_mm of mixture-of-experts layers wants bf16 there).
    with torch.no_grad():
        gm = _make_fx(forward, args, ("fake", "real"), "the forward pass", redraw=_redraw_inputs(len(inputs)))
    op_names = _aten_op_names(gm, pnames, bnames, {n for n, _ in bufs})
    return TracedModel(gm=gm, args=args, op_names=op_names, module=module, name=fn_name, mode="inference",
                       batch=batch, params=params, buffers=bufs, capture="make_fx")


def _trace_training(spec, module, inputs, fn_name, batch, params, bufs) -> TracedModel:
    import torch

    module.train()
    all_bufs = list(module.named_buffers())
    pnames = [n for n, _ in params]
    bnames = [n for n, _ in all_bufs]
    n_p, n_b = len(pnames), len(bnames)

    def train_step(*flat):
        p = dict(zip(pnames, flat[:n_p]))
        b = dict(zip(bnames, flat[n_p:n_p + n_b]))
        out = torch.func.functional_call(module, {**p, **b}, tuple(flat[n_p + n_b:]))
        loss = training_loss(out)
        grads = torch.autograd.grad(loss, list(p.values()), allow_unused=True)
        # An unused parameter still gets a (zero) gradient, so every parameter has a send.
        grads = [g if g is not None else torch.zeros_like(v) for g, v in zip(grads, p.values())]
        return (loss, *grads)

    args = _functional_args(params, all_bufs, inputs, grad=True)
    # Fake tensors trace without computing (ResNet-50 in seconds); real tensors are the fallback.
    try:
        gm = _make_fx(train_step, args, ("fake", "real"), "a training step of the module")
    except _CaptureFailed as e:
        raise ImportFailure(f"{spec}: {e}") from None
    op_names = _aten_op_names(gm, pnames, bnames, {n for n, _ in bufs})
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output.args[0]
    loss_node = op_names.get(outs[0].name)
    grad_nodes = {}
    for pname, g in zip(pnames, outs[1:]):
        if not isinstance(g, torch.fx.Node) or g.name not in op_names or g.op == "placeholder":
            raise ImportFailure(f"{spec}: the traced training step has no op producing the gradient of {pname!r}")
        grad_nodes[pname] = op_names[g.name]
    real_args = tuple(a.detach() for a in args)
    return TracedModel(gm=gm, args=real_args, op_names=op_names, module=module, name=fn_name, mode="training",
                       batch=batch, params=params, buffers=bufs, loss_node=loss_node, grad_nodes=grad_nodes,
                       capture="make_fx")


# -- building the DAG -------------------------------------------------------------
def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _metas(node) -> list:
    """``(shape, dtype)`` of a node's tensor outputs, flattened (``[]`` for non-tensor results).

    ShapeProp stores ``tensor_meta``; make_fx stores fake tensors in ``val``
    (and ``tensor_meta`` only for single-tensor results).
    """
    import torch
    from torch.fx.passes.shape_prop import TensorMetadata

    out: list = []

    def walk(x):
        if isinstance(x, (TensorMetadata, torch.Tensor)):
            out.append((list(x.shape), x.dtype))
        elif isinstance(x, (tuple, list)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)

    walk(node.meta["tensor_meta"] if "tensor_meta" in node.meta else node.meta.get("val"))
    return out


def _jsonable(v: Any) -> Any:
    """``v`` as JSON (ints, floats, bools, strings and lists of them), else ``None``."""
    if isinstance(v, bool) or isinstance(v, (int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        items = [_jsonable(x) for x in v]
        return None if any(x is None for x in items) else items
    return None


def _attrs(node, module) -> tuple[str, dict]:
    """op_type and cost-model attributes of a compute node."""
    import torch

    attrs: dict = {}
    if node.op == "call_module":
        sub = module.get_submodule(node.target)
        for key in _MODULE_ATTRS:
            if hasattr(sub, key):
                v = _jsonable(getattr(sub, key))
                if v is not None:
                    attrs[key] = v
        if isinstance(sub, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)):
            attrs["bias"] = sub.bias is not None
        attrs["module"] = node.target
        return type(sub).__name__, attrs
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None:  # an aten OpOverload: keep its non-tensor arguments by schema name
        for arg, value in zip(schema.arguments, node.args):
            if not isinstance(value, torch.fx.Node):
                v = _jsonable(value)
                if v is not None:
                    attrs[arg.name] = v
        for key, value in node.kwargs.items():
            v = None if isinstance(value, torch.fx.Node) else _jsonable(value)
            if v is not None:
                attrs[key] = v
        return str(target), attrs
    op_type = target if isinstance(target, str) else getattr(target, "__name__", str(target))
    scalars = [_jsonable(a) for a in node.args if not isinstance(a, torch.fx.Node)]
    if node.op != "call_method" and any(s is not None for s in scalars):
        attrs["args"] = [s for s in scalars if s is not None]
    elif node.op == "call_method" and len(node.args) > 1:
        rest = [_jsonable(a) for a in node.args[1:] if not isinstance(a, torch.fx.Node)]
        if any(s is not None for s in rest):
            attrs["args"] = [s for s in rest if s is not None]
    for key, value in node.kwargs.items():
        v = None if isinstance(value, torch.fx.Node) else _jsonable(value)
        if v is not None:
            attrs[key] = v
    return str(op_type), attrs


def _transfer_fields(t) -> dict:
    return dict(bytes=t.numel() * t.element_size(), params=t.numel(), shape=list(t.shape),
                dtypes=[_dtype_name(t.dtype)], op_type="Recv")


def build_graph(traced: TracedModel, spec: str) -> Graph:
    """Turn a :class:`TracedModel` into the common DAG (see the module docstring)."""
    gm = traced.gm
    graph = Graph(traced.name, traced.mode, {"format": "torch", "spec": spec, "batch": traced.batch},
                  capture=traced.capture)
    aten = traced.capture == "make_fx"
    n_p = len(traced.params)
    n_transfers = n_p + len(traced.buffers)
    for i, (name, t) in enumerate(traced.params):
        graph.add_op(name, RECV, index=i, **_transfer_fields(t))
    names = traced.op_names
    loss_seen = traced.loss_node is None
    index = n_transfers
    for node in gm.graph.nodes:
        if node.op not in ("call_module", "call_function", "call_method"):
            continue
        op_type, attrs = _attrs(node, traced.module)
        metas = _metas(node)
        in_shapes = []
        for arg in node.all_input_nodes:
            in_shapes.extend([shape for shape, _ in _metas(arg)])
        phase = "forward"
        if traced.mode == "training":
            # make_fx records in execution order: the whole forward pass (including side effects
            # such as BatchNorm's running-statistics updates) runs before autograd.grad starts.
            phase = "backward" if loss_seen else "forward"
            if names[node.name] == traced.loss_node:
                loss_seen = True
        graph.add_op(names[node.name], COMPUTE, index=index, op_type=op_type, attrs=attrs,
                     output_shapes=[shape for shape, _ in metas], input_shapes=in_shapes,
                     dtypes=[_dtype_name(dtype) for _, dtype in metas], phase=phase)
        index += 1
    # Data dependencies between ops, and parameter placeholders / get_attr reads → their consumers.
    for node in gm.graph.nodes:
        dst = names.get(node.name)
        if dst is None or dst not in graph or graph.op(dst).kind != COMPUTE:
            continue
        for arg in node.all_input_nodes:
            src = names.get(arg.name)
            if src is not None and src in graph:
                graph.add_edge(src, dst)
    if not aten:
        _owner_edges(graph, traced, [n for n, _ in traced.params])
    else:
        # Parameter placeholders fed their readers above; views of one parameter now merge into its recv.
        if traced.mode == "training":
            add_gradient_sends(graph, traced.grad_nodes)
        fold_parameter_views(graph, _PARAM_VIEWS)
    # Buffers come after the sends are made (they carry no gradient), with indices after the parameters.
    for j, (name, t) in enumerate(traced.buffers):
        graph.add_op(name, RECV, index=n_p + j, **_transfer_fields(t))
    for node in gm.graph.nodes:
        src = names.get(node.name)
        if src is None or node.op not in ("placeholder", "get_attr") or src in graph and graph.op(src).kind != RECV:
            continue
        if aten and src not in {n for n, _ in traced.buffers}:
            continue
        for user in node.users:
            if user.name in names and names[user.name] in graph:
                graph.add_edge(src, names[user.name])
    if not aten:
        _owner_edges(graph, traced, [n for n, _ in traced.buffers])
    graph.renumber()
    return graph


# Views that read a parameter without computing anything (a Linear weight's transpose, detach).
_PARAM_VIEWS = {
    "aten.t.default", "aten.detach.default", "aten.view.default", "aten._unsafe_view.default",
    "aten.reshape.default", "aten.expand.default", "aten.permute.default", "aten.transpose.int",
    "aten.alias.default", "aten.unsqueeze.default", "aten.squeeze.dim",
}


def _owner_edges(graph: Graph, traced: TracedModel, transfer_names: list) -> None:
    """recv → every call of the module owning it (longest module-path prefix)."""
    calls: dict[str, list[str]] = {}
    for node in traced.gm.graph.nodes:
        if node.op == "call_module":
            calls.setdefault(node.target, []).append(traced.op_names[node.name])
    for name in transfer_names:
        path = name.split(".")[:-1]
        while path:
            owner = ".".join(path)
            if owner in calls:
                for op in calls[owner]:
                    graph.add_edge(name, op)
                break
            path.pop()


def import_factory(spec: str, mode: str = "inference", batch: int | None = None,
                   buffers: bool = False, capture: str | None = None) -> Graph:
    """Import a PyTorch model factory into the common DAG (DESIGN §2).

    Parameters
    ----------
    spec : str
        ``path/to/file.py:fn`` (loaded with :mod:`importlib` from the file) or
        ``package.module:fn``; ``fn()`` returns ``(module, example_inputs)``.
    mode : {"inference", "training"}
        ``inference`` traces ``module.eval()`` with ``torch.fx.symbolic_trace``,
        or, where that fails, captures its forward pass with ``make_fx`` under
        ``torch.no_grad()`` (the capture used is ``graph.capture``).
        ``training`` traces one functional training step with ``make_fx`` in
        ``train()`` mode: ``functional_call`` of the module, a loss (cross-entropy
        against class 0 when the output is 2-D logits, else
        ``out.float().pow(2).mean()`` summed over the float outputs, so every
        output contributes to the gradients), and ``torch.autograd.grad`` with
        respect to every parameter. Ops recorded before the loss are
        ``phase="forward"``, the rest ``"backward"``. Every aten node is
        kept, except views of a single parameter, which merge into its recv.
    batch : int, optional
        If the factory accepts a ``batch`` keyword it is called with it;
        otherwise dim 0 of every example tensor is resized to ``batch``
        (rows repeated cyclically, or truncated).
    buffers : bool
        Also make floating-point buffers (BatchNorm running mean/var) recv ops,
        after the parameters. Buffers have no gradient, so no send.
    capture : {"symbolic_trace", "make_fx"}, optional
        Force one capture (see :func:`trace_factory`); default: the first of
        the mode's captures that works.

    Returns
    -------
    Graph
        recv ops first (declaration order), compute ops in fx order, then sends
        (``<param>/grad``); ``source = {"format": "torch", "spec", "batch"}``;
        ``capture`` is ``"symbolic_trace"`` or ``"make_fx"``.

    Raises
    ------
    ImportFailure
        The file or module is missing, the function does not exist, the
        factory raised or returned the wrong thing, or tracing failed.

    Examples
    --------
    >>> g = import_factory("examples/torch_models.py:resnet50", batch=1)  # doctest: +SKIP
    >>> g.param_count                                                      # doctest: +SKIP
    25557032
    """
    traced = trace_factory(spec, mode=mode, batch=batch, buffers=buffers, capture=capture)
    graph = build_graph(traced, spec)
    graph.validate()
    return graph
