"""Memory of one training step, and the largest batch that fits (DESIGN §5).

The model (paper ``003_*`` §3.1.3, equations 2–5, generalised to any DAG):

    M(b) = M_params·(1 + 1 + k_opt) + b·(M_act + M_work) + M_fixed

with parameters, their gradients and ``k_opt`` optimizer state copies (SGD 0,
momentum 1, Adam 2), ``M_act`` the activation bytes kept per sample for the
backward pass, ``M_work`` the per-sample workspace and ``M_fixed`` a constant
(static: the largest parameter, whose gradient the backward computes into a
fresh buffer before adding it to the resident one; measured: the fit's
intercept left after the parameter state).

Two estimates produce a :class:`MemoryEstimate`:

- :func:`static_estimate` reads it off a training DAG (this module);
- :func:`dlsched.planning.measure.measured_estimate` fits it to the peak
  memory of real training steps.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, _ = random_dag(10, 4, training=True, seed=0)
>>> est = static_estimate(g, optimizer="adam")
>>> est.estimate, est.activation_bytes_per_sample
('static', 640.0)
>>> est.largest_batch(est.total(5) / 0.9)
5
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import networkx as nx

from dlsched.dag import COMPUTE, RECV, Graph, dtype_size
from dlsched.errors import DlschedError, DlschedWarning
from dlsched.graph_batch import floating, graph_batch, symbolic_batch_error, unknown_batch

OPTIMIZER_STATE_COPIES = {"sgd": 0, "momentum": 1, "adam": 2}
#: Share of a memory budget a plan leaves free (batch plans and FSDP plans): a real peak moves from run to run.
MARGIN = 0.1
PARAMETER_DTYPES = frozenset({"float64", "double", "float32", "float", "float16", "half", "bfloat16",
                              "int8", "uint8"})

# Ops whose output aliases their first input's storage (torch aten names,
# ONNX/TF spellings): a saved view keeps its base alive, so liveness counts
# the base once instead of the view.
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "squeeze", "unsqueeze",
    "alias", "detach", "slice", "select", "as_strided", "flatten", "unflatten", "view_as", "numpy_t",
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "ExpandDims", "StopGradient",
})


def fmt_bytes(n: float) -> str:
    """Human bytes in binary units (for messages): ``527.8 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def optimizer_copies(optimizer: str) -> int:
    """Optimizer state copies per parameter: sgd 0, momentum 1, adam 2.

    Raises
    ------
    DlschedError
        For an unknown optimizer name.
    """
    try:
        return OPTIMIZER_STATE_COPIES[optimizer.lower()]
    except KeyError:
        raise DlschedError(f"unknown optimizer {optimizer!r}; expected one of "
                           f"{', '.join(OPTIMIZER_STATE_COPIES)}") from None



def check_margin(margin: float) -> None:
    """Refuse a headroom outside [0, 1).

    Raises
    ------
    DlschedError
    """
    if not 0 <= margin < 1:
        raise DlschedError(f"--margin must be in [0, 1), got {margin}")

@dataclass
class MemoryEstimate:
    """``M(b)`` for one model, optimizer and estimate kind.

    Attributes
    ----------
    model : str
    estimate : {"static", "measured"}
    optimizer : str
    param_bytes : float
        Bytes of the trainable parameters (``M_params``).
    activation_bytes_per_sample : float
        ``M_act``: for ``static``, forward outputs read by the backward pass;
        for ``measured``, the slope of peak memory against batch size.
    workspace_bytes_per_sample : float
        ``M_work`` per sample (static: the largest single forward output per
        sample, the transient gradient buffer of the biggest layer during
        backward; measured: 0, the slope already includes it).
    fixed_bytes : float
        A constant term: for static, the largest parameter (its gradient's
        fresh buffer); for measured, the fit's intercept minus the parameter,
        gradient and optimizer bytes (framework buffers, transient
        temporaries; see :func:`dlsched.planning.measure.fit_peaks`).
    step_peak_bytes : float
        Measured only: the peak while the optimizer steps (activations freed,
        optimizer temporaries such as Adam's alive). It does not grow with the
        batch, so ``M(b)`` is the larger of the linear model and this floor.
    details : dict
        How the figures were obtained (reference batch, counts, fit points).

    Raises
    ------
    DlschedError
        A negative or non-finite component: each one is memory held.
    """

    model: str
    estimate: str
    optimizer: str
    param_bytes: float
    activation_bytes_per_sample: float
    workspace_bytes_per_sample: float = 0.0
    fixed_bytes: float = 0.0
    step_peak_bytes: float = 0.0
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("param_bytes", "activation_bytes_per_sample", "workspace_bytes_per_sample", "fixed_bytes",
                     "step_peak_bytes"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise DlschedError(f"the {self.estimate} memory estimate of {self.model!r}: {name} must be a "
                                   f"finite number of bytes ≥ 0, got {value!r}")

    @property
    def optimizer_state_bytes(self) -> float:
        return self.param_bytes * optimizer_copies(self.optimizer)

    @property
    def gradient_bytes(self) -> float:
        return self.param_bytes

    @property
    def state_bytes(self) -> float:
        """Parameters + gradients + optimizer state: ``M_params·(2 + k_opt)``."""
        return self.param_bytes * (2 + optimizer_copies(self.optimizer))

    @property
    def per_sample_bytes(self) -> float:
        return self.activation_bytes_per_sample + self.workspace_bytes_per_sample

    def total(self, batch: float) -> float:
        """``M(b)`` in bytes (at least the optimizer-step peak when one was measured)."""
        return max(self.state_bytes + self.fixed_bytes + batch * self.per_sample_bytes, self.step_peak_bytes)

    def largest_batch(self, capacity: float, margin: float = MARGIN) -> int:
        """Largest ``b`` with ``M(b) ≤ capacity·(1 − margin)``; 0 when not even one sample fits.

        Raises
        ------
        DlschedError
            For a margin outside [0, 1) or a non-positive capacity.
        """
        check_margin(margin)
        if capacity <= 0:
            raise DlschedError(f"memory capacity must be positive, got {capacity}")
        usable = capacity * (1 - margin)
        room = usable - self.state_bytes - self.fixed_bytes
        if room < self.per_sample_bytes or self.step_peak_bytes > usable:
            return 0
        if self.per_sample_bytes <= 0:
            raise DlschedError(f"the {self.estimate} estimate of model {self.model!r} has no per-sample memory; "
                               "the batch size is not bounded by memory")
        b = int(room // self.per_sample_bytes)
        while b > 0 and self.total(b) > usable:  # float rounding at the boundary
            b -= 1
        return b

    def frame(self, batch: int):
        """The breakdown at ``batch`` as a DataFrame (component, bytes, note)."""
        import pandas as pd

        rows = [
            ("parameters", self.param_bytes, "M_params"),
            ("gradients", self.gradient_bytes, "one copy of the parameters"),
            ("optimizer state", self.optimizer_state_bytes,
             f"{optimizer_copies(self.optimizer)} cop{'y' if optimizer_copies(self.optimizer) == 1 else 'ies'} "
             f"({self.optimizer})"),
            ("activations per sample", self.activation_bytes_per_sample,
             "forward outputs read by the backward" if self.estimate == "static"
             else "slope of measured peak vs batch"),
            (f"activations at batch {batch}", batch * self.activation_bytes_per_sample, ""),
            (f"workspace at batch {batch}", batch * self.workspace_bytes_per_sample + self.fixed_bytes,
             "largest forward output per sample × batch + largest parameter" if self.estimate == "static"
             else "measured intercept minus parameter state"),
            (f"total at batch {batch}", self.total(batch), f"{self.estimate} estimate"),
        ]
        if self.step_peak_bytes:
            rows.insert(-1, ("optimizer step peak", self.step_peak_bytes,
                             "measured; a floor, independent of the batch"))
        return pd.DataFrame(rows, columns=["component", "bytes", "note"])

    def to_dict(self, batch: int | None = None) -> dict:
        d = {
            "estimate": self.estimate,
            "optimizer": self.optimizer,
            "parameters": self.param_bytes,
            "gradients": self.gradient_bytes,
            "optimizer_state": self.optimizer_state_bytes,
            "activations_per_sample": self.activation_bytes_per_sample,
            "workspace_per_sample": self.workspace_bytes_per_sample,
            "fixed": self.fixed_bytes,
            "step_peak": self.step_peak_bytes,
            "details": self.details,
        }
        if batch is not None:
            d["batch"] = batch
            d["workspace"] = batch * self.workspace_bytes_per_sample + self.fixed_bytes
            d["activations"] = batch * self.activation_bytes_per_sample
            d["total"] = self.total(batch)
        return d


def _base_type(op_type: str) -> str:
    """``aten.view.default`` → ``view``; ``Reshape`` stays ``Reshape``."""
    parts = str(op_type).split(".")
    if len(parts) >= 2 and parts[0] == "aten":
        return parts[1]
    return parts[-1] if parts[0] in ("torch", "operator") else str(op_type)


def _output_bytes(op) -> int | None:
    """Bytes of all outputs of ``op``; ``None`` when a shape is unknown."""
    total = 0
    for i, shape in enumerate(op.output_shapes or []):
        if shape is None or any(d is None or (isinstance(d, (int, float)) and d < 0) for d in shape):
            return None
        dtype = op.dtypes[i] if i < len(op.dtypes) else (op.dtypes[0] if op.dtypes else "float32")
        total += math.prod(int(d) for d in shape) * dtype_size(dtype)
    return total


# A backward that only mirrors the forward (the ONNX importer's ``f/grad``, marked
# ``attrs["forward"] = f``) says when it runs, not what it reads. What autograd keeps
# for the backward of each op type: "self", each input that needs a gradient (the
# derivative of a nonlinear op reads its input); "cross", each input when another
# input needs a gradient (a product's derivative in one factor is the other
# factor; ``x·c`` for a constant ``c`` keeps nothing of ``x``); "output" (ReLU,
# softmax); "self+output"; or "none" (sums, copies, shape changes). Unlisted
# types keep their output, which is what the mirror edge alone would say.
MIRROR_SAVES = {
    **dict.fromkeys(("Conv", "ConvTranspose", "MatMul", "Gemm", "Mul", "Div", "Einsum"), "cross"),
    **dict.fromkeys(("Erf", "Log", "Pow", "Gelu", "BatchNormalization", "LayerNormalization", "InstanceNormalization",
                     "GroupNormalization", "MaxPool", "LeakyRelu", "PRelu", "Selu", "Softplus", "HardSigmoid",
                     "HardSwish", "Sin", "Cos", "Tan", "Atan", "Abs", "Clip", "Max", "Min", "LpNormalization",
                     "ReduceL2", "LRN", "Mish"), "self"),
    **dict.fromkeys(("Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp", "Sqrt", "Elu", "Reciprocal"),
                    "output"),
    **dict.fromkeys(("ReduceMax", "ReduceMin", "ReduceProd"), "self+output"),
    **dict.fromkeys(("Add", "Sub", "Neg", "Sum", "Concat", "Split", "Slice", "Gather", "Pad", "Expand", "Tile",
                     "Cast", "Where", "Equal", "Shape", "Constant", "ConstantOfShape", "Range", "ReduceMean",
                     "ReduceSum", "GlobalAveragePool", "AveragePool", "Dropout", "Identity", "Reshape", "Transpose",
                     "Flatten", "Squeeze", "Unsqueeze"), "none"),
}


# Exporters spell GELU (``0.5·x·(1 + erf(x/√2))``, or its tanh form) and SiLU
# (``x·sigmoid(x)``) as chains of these elementwise ops; PyTorch runs each as one
# kernel that keeps its input only, and ONNX runtimes fuse them back.
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sigmoid", "Sqrt", "Neg", "Reciprocal"})
ACTIVATION_CORES = frozenset({"Erf", "Tanh", "Sigmoid"})


def _decomposed_activations(graph: Graph, ops: dict) -> dict[str, list[str]]:
    """Interior ops of decomposed activations → the activation's inputs.

    A region joins elementwise forward ops through outputs that only
    elementwise ops read; one holding an ``Erf``, ``Tanh`` or ``Sigmoid`` is
    an activation, run as one kernel: its interior outputs are not kept, its
    inputs are kept instead. Its output (read by a non-elementwise op) is not
    interior.
    """
    forward = {n for n, op in ops.items() if op.kind == COMPUTE and op.phase == "forward"}
    elem = {n for n in forward if _base_type(ops[n].op_type) in ELEMENTWISE}
    readers = {n: [s for s in graph.successors(n) if s in forward] for n in elem}
    interior = {n for n in elem if readers[n] and all(s in elem for s in readers[n])}
    parent = {n: n for n in elem}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in interior:
        for s in readers[n]:
            parent[find(s)] = find(n)
    regions: dict[str, list[str]] = {}
    for n in sorted(elem, key=lambda n: ops[n].index):
        regions.setdefault(find(n), []).append(n)
    out = {}
    for members in regions.values():
        if not any(_base_type(ops[m].op_type) in ACTIVATION_CORES for m in members):
            continue
        inside = set(members)
        inputs = sorted({p for m in members for p in graph.predecessors(m) if p in forward and p not in inside},
                        key=lambda n: ops[n].index)
        out.update((m, inputs) for m in members if m in interior)
    return out


def _mirror_keeps(graph: Graph, ops: dict, op, needs_grad: set, fused: dict) -> list:
    """What a mirrored backward keeps for forward ``op`` (:data:`MIRROR_SAVES`, fused activations)."""
    rule = MIRROR_SAVES.get(_base_type(op.op_type), "output")
    preds = [ops[p] for p in graph.predecessors(op.name)]
    keep = [op] if rule in ("output", "self+output") else []
    for p in preds:
        if p.kind != COMPUTE or p.phase != "forward":
            continue
        if (rule in ("self", "self+output") and p.name in needs_grad) or (
                rule == "cross" and any(q.name in needs_grad for q in preds if q is not p)):
            keep.append(p)
    out = []
    for t in keep:  # inside a fused activation: its inputs instead
        out += [ops[n] for n in fused[t.name] if n in needs_grad] if t.name in fused else [t]
    return out


def saved_activations(graph: Graph) -> tuple[dict[str, int], list[str]]:
    """Forward tensors the backward pass reads, by the op owning their storage.

    Liveness rule: a forward compute op whose output has a backward consumer
    is kept from the forward pass to the backward pass. A view (``VIEW_OPS``)
    aliases its input, so the op owning the storage is counted, once; views of
    parameters (a recv) are parameter memory, not activations. A mirrored
    backward op (``attrs["forward"]`` names its forward op) reads what
    :data:`MIRROR_SAVES` says autograd keeps for that op type: some of its
    forward inputs, its output, both or nothing; an input counts only when
    a gradient flows where the rule needs it (it depends on a parameter). A
    decomposed activation (GELU, SiLU: :data:`ELEMENTWISE` ops around an
    ``Erf``, ``Tanh`` or ``Sigmoid``) keeps its inputs, as its one kernel does.

    Returns
    -------
    (dict, list)
        ``{owner op name: output bytes}`` and the names of saved ops whose
        output shape is unknown (not counted), each once.

    Examples
    --------
    >>> from dlsched.dag import COMPUTE, Graph
    >>> g = Graph("m", "training", {"batch": 2})
    >>> _ = g.add_op("w", RECV, bytes=64, params=16, shape=[4, 4])
    >>> for name, kind in [("conv", "Conv"), ("relu", "Relu"), ("conv2", "Conv"), ("add", "Add")]:
    ...     _ = g.add_op(name, COMPUTE, op_type=kind, output_shapes=[[2, 4]], dtypes=["float32"])
    ...     _ = g.add_op(name + "/grad", COMPUTE, op_type="Grad", phase="backward", attrs={"forward": name})
    ...     g.add_edge(name, name + "/grad")
    >>> for u, v in [("w", "conv"), ("conv", "relu"), ("relu", "conv2"), ("w", "conv2"), ("conv2", "add")]:
    ...     g.add_edge(u, v)
    >>> saved_activations(g)   # Relu keeps its output (conv2's input too), Add and Conv's outputs nothing
    ({'relu': 32}, [])
    """
    ops = {op.name: op for op in graph.ops()}

    def owner(op):
        seen = set()
        while _base_type(op.op_type) in VIEW_OPS and op.name not in seen:
            seen.add(op.name)
            preds = sorted((ops[p] for p in graph.predecessors(op.name)), key=lambda o: o.index)
            if not preds:
                return op
            first = preds[0]
            if first.kind == RECV:
                return None
            if first.kind != COMPUTE or first.phase != "forward":
                return op
            op = first
        return op

    needs_grad: set[str] = set()  # recvs, and forward ops downstream of one
    fused = None  # decomposed activations, found on the first mirrored op

    def kept(op):
        """The forward ops whose outputs the backward keeps because of ``op``."""
        nonlocal fused
        readers = [ops[s] for s in graph.successors(op.name) if ops[s].kind == COMPUTE
                   and ops[s].phase == "backward"]
        if any(r.attrs.get("forward") != op.name for r in readers):
            return [op]  # a real backward op reads this output
        if not readers:
            return []
        if fused is None:
            fused = _decomposed_activations(graph, ops)
        return _mirror_keeps(graph, ops, op, needs_grad, fused)

    saved: dict[str, int] = {}
    unknown: dict[str, None] = {}
    for name in nx.topological_sort(graph.nx):
        op = ops[name]
        if op.kind == RECV or (op.kind == COMPUTE and op.phase == "forward" and floating(op)
                               and any(p in needs_grad for p in graph.predecessors(name))):
            needs_grad.add(name)
        if op.kind != COMPUTE or op.phase != "forward":
            continue
        for keep in kept(op):
            root = owner(keep)
            if root is None or root.name in saved or root.name in unknown:
                continue
            n = _output_bytes(root)
            if n is None:
                unknown[root.name] = None
                continue
            saved[root.name] = n
    return saved, list(unknown)


def static_estimate(graph: Graph, optimizer: str = "sgd", dtype: str | None = None,
                    batch: int | None = None) -> MemoryEstimate:
    """Estimate ``M(b)`` from a training DAG's shapes and liveness (DESIGN §5).

    Parameters
    ----------
    graph : Graph
        A ``training`` graph (forward ops with ``output_shapes``/``dtypes``,
        backward ops with ``phase="backward"``, recv ops with ``bytes``).
    optimizer : {"sgd", "momentum", "adam"}
    dtype : str, optional
        Bytes per parameter element from this dtype instead of the recv ops'
        ``bytes`` (e.g. ``float16`` for a half-precision copy).
    batch : int, optional
        The batch the graph was imported at (default: :func:`graph_batch`).

    Returns
    -------
    MemoryEstimate
        ``estimate="static"``. ``M_params`` = Σ recv bytes; ``M_act`` = Σ bytes
        of forward outputs read by a backward op (:func:`saved_activations`)
        / batch; workspace per sample = the largest single forward output with
        a leading batch dimension, per sample (the gradient of the largest activation is alive while the
        backward of its layer runs); ``fixed_bytes`` = the largest parameter
        (its gradient is computed into a fresh buffer, then added to the
        resident gradients: VGG-16's first classifier weight, 392 MiB).

    Raises
    ------
    DlschedError
        The graph is not a training graph, or has no forward shapes.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, _ = random_dag(6, 3, training=True, seed=2)
    >>> static_estimate(g).activation_bytes_per_sample   # 6 saved [8,16] float32 outputs / 8
    384.0
    """
    optimizer_copies(optimizer)
    if dtype is not None and str(dtype).lower().replace("torch.", "") not in PARAMETER_DTYPES:
        raise DlschedError(f"--dtype {dtype!r}: unknown parameter dtype; expected one of "
                           f"{', '.join(sorted(PARAMETER_DTYPES))}")
    backward = [op for op in graph.compute_ops() if op.phase == "backward"]
    if graph.mode != "training" or not backward:
        raise DlschedError(f"model {graph.name!r} is not a training graph (mode {graph.mode!r}, "
                           f"{len(backward)} backward ops); the static memory estimate needs forward and backward")
    b = batch or graph_batch(graph)
    sizes = [op.params * dtype_size(dtype) if dtype is not None else op.bytes for op in graph.recvs()]
    param_bytes = float(sum(sizes))
    saved, unknown = saved_activations(graph)
    # No batch fixed at import (a batch given for a saved DAG does not change its shapes): the unknown
    # leading dimensions are the batch. With one fixed, they are shapes inference lost (a warning below).
    symbolic = [] if (graph.source or {}).get("batch") else [n for n in unknown if unknown_batch(graph.op(n))]
    if symbolic:
        raise symbolic_batch_error(graph, len(symbolic))
    largest = 0
    for op in graph.compute_ops():
        # per-sample tensors only: a leading batch dimension (parameter views like t(weight) are not)
        if op.phase == "forward" and op.output_shapes and op.output_shapes[0] and op.output_shapes[0][0] == b:
            n = _output_bytes(op)
            if n:
                largest = max(largest, n)
    if not saved and unknown:
        raise DlschedError(f"model {graph.name!r}: no output shapes on the {len(unknown)} forward ops the backward "
                           "reads; cannot estimate activation memory statically (try --measure)")
    if unknown:
        warnings.warn(DlschedWarning(
            f"model {graph.name!r}: {len(unknown)} of the {len(saved) + len(unknown)} tensors the backward keeps "
            f"have unknown shapes and are not counted (e.g. {', '.join(unknown[:3])}); the static activation "
            "memory is low by their size (--measure counts them)"))
    return MemoryEstimate(
        model=graph.name, estimate="static", optimizer=optimizer.lower(), param_bytes=param_bytes,
        activation_bytes_per_sample=sum(saved.values()) / b,
        workspace_bytes_per_sample=largest / b, fixed_bytes=float(max(sizes, default=0)),
        details={"reference_batch": b, "saved_tensors": len(saved), "unknown_shapes": len(unknown),
                 "parameter_dtype": dtype or "as imported"},
    )
