"""TensorFlow kernels that stand for several graph nodes: whose time is whose (DESIGN §3).

TensorFlow rewrites chains of nodes into one kernel before running them:

- oneDNN's graph rewrite (on by default on x86 CPUs with AVX-512, off with
  ``TF_ENABLE_ONEDNN_OPTS=0``; it runs even with Grappler off): Conv2D + BiasAdd
  → ``_MklNativeConv2DWithBias``, Pad + Conv2D → ``_MklNativePadWithConv2D``,
  Conv2DBackpropFilter + BiasAddGrad → ``_MklNativeConv2DBackpropFilterWithBias``;
- Grappler's remapper: Conv2D/MatMul + BiasAdd (+ Relu …) → ``_FusedConv2D`` /
  ``_FusedMatMul``, FusedBatchNorm + Relu → ``_FusedBatchNormEx``, which oneDNN
  turns into ``_MklNativeFusedConv2D``, ``_MklNativeFusedMatMul`` ….

Step stats and timelines then hold one entry for the kernel, carrying the name
of the node whose output leaves the chain (its consumers refer to it by that
name): the BiasAdd or Relu after a convolution or matmul, the Conv2D after a Pad
(checked on TF 2.21, both oneDNN settings). The other nodes of the chain have no
entry at all.

The rule, in one place for the profiler and the timeline import:

1. A kernel is *fused* when its op type, without oneDNN's ``_Mkl``/``_MklNative``
   prefix, is not the op type of the node whose name it carries
   (``_MklMatMul`` for a ``MatMul`` is the same op under another kernel, not a
   fusion).
2. Its *group* is that node plus every compute op upstream of it that ran no
   kernel of its own, walking predecessors until ops that did (or recvs, or fed
   inputs). When a kernel ran, all its inputs were computed; the upstream nodes
   that left no entry are exactly the ones folded into it. A kernel that also
   computes a sibling from the same inputs (:data:`SIBLING_FUSIONS`:
   ``_MklNativeConv2DBackpropFilterWithBias`` is the filter gradient and the
   ``BiasAddGrad`` beside it) takes in that sibling when it ran no kernel.
3. The kernel's time goes to the group member doing the arithmetic: its
   convolution or matrix product (by op type, as :mod:`dlsched.profiling.flops`
   classes them, so it holds with unknown shapes too); without one (BatchNorm +
   Relu, a layer norm), the member with the most FLOPs; the earliest in
   canonical order on ties. The others get 0, so the group's total is the
   kernel's measured time. Why the conv: the bias add and
   the activation are applied to each output tile while it is still in cache
   and add next to nothing, and a Pad folded into a convolution is absorbed in
   its input indexing; charging the conv keeps the oracle close to what each
   op would cost on its own, and the rest of the chain cannot start before the
   conv anyway, so the schedule is the same.

Examples
--------
>>> from dlsched.dag import COMPUTE, Graph
>>> g = Graph("m")
>>> _ = g.add_op("conv", COMPUTE, op_type="Conv2D")
>>> _ = g.add_op("bias", COMPUTE, op_type="BiasAdd")
>>> g.add_edge("conv", "bias")
>>> per_op, fused = split_fused(g, {"bias": [3e-3, 4e-3]}, {"bias": "_MklNativeConv2DWithBias"})
>>> per_op
{'bias': [0.0, 0.0], 'conv': [0.003, 0.004]}
>>> fused["bias"].reason
'fused into conv: TensorFlow ran Conv2D + BiasAdd as one _MklNativeConv2DWithBias kernel'
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection, Mapping

from dlsched.dag import COMPUTE, Graph

from .flops import CONV, MATMUL, normalise, op_cost

_ONEDNN_PREFIX = re.compile(r"^_Mkl(Native)?")
# Kernels that also compute a sibling of the node they are named after, from the same input: oneDNN's
# filter gradient with the bias gradient, both reductions of one out_backprop (EfficientNet's
# squeeze-and-excitation convolutions in training).
SIBLING_FUSIONS = {"Conv2DBackpropFilterWithBias": "BiasAddGrad"}


@dataclass(frozen=True)
class Fusion:
    """One kernel that ran several DAG ops.

    Attributes
    ----------
    kernel : str
        The node name the kernel carries in step stats / the timeline.
    kernel_op : str
        Its op type (``_MklNativeFusedConv2D``).
    work : str
        The DAG op given the kernel's time.
    members : tuple of str
        Every DAG op the kernel ran, in canonical order (``work`` included).
    member_types : tuple of str
        Their op types, same order.
    """

    kernel: str
    kernel_op: str
    work: str
    members: tuple
    member_types: tuple

    @property
    def reason(self) -> str:
        """Why a member other than ``work`` has time 0 (the text the profile command reports)."""
        return f"fused into {self.work}: TensorFlow ran {' + '.join(self.member_types)} as one {self.kernel_op} kernel"


def is_fused(kernel_op: str, node_op_type: str) -> bool:
    """Whether a kernel of type ``kernel_op``, named after a node of type ``node_op_type``, is a fusion.

    >>> is_fused("_MklMatMul", "MatMul"), is_fused("_FusedMatMul", "Relu")
    (False, True)
    """
    return bool(kernel_op) and _ONEDNN_PREFIX.sub("", kernel_op) != node_op_type


def _work_rank(graph: Graph, name: str) -> tuple:
    """Sort key of the member that gets a fused kernel's time: conv/matmul first, then FLOPs, then earliest."""
    op = graph.op(name)
    cost = op_cost(graph, op)  # None when shapes are unknown (a symbolic batch)
    return (normalise(op.op_type) in CONV | MATMUL, cost.flops if cost is not None else 0.0, -op.index)


def find_fusions(graph: Graph, kernel_ops: Mapping[str, str], ran: Collection[str],
                 exclude: Collection[str] = ()) -> list[Fusion]:
    """The fused kernels among those that ran, with the DAG ops each one stands for.

    Parameters
    ----------
    graph : Graph
    kernel_ops : mapping
        Node name a kernel carries → the kernel's op type, for every kernel
        that ran (from step stats' ``timeline_label`` or a timeline's ``args.op``).
    ran : collection of str
        DAG op names that have an entry of their own; the walk stops at them.
    exclude : collection of str
        Compute ops never folded into a kernel (fed placeholders: fed, not run).

    Returns
    -------
    list of Fusion
        In canonical order of the kernels' nodes; a DAG op belongs to at most
        one (the first kernel that reaches it).
    """
    ran, exclude = set(ran), set(exclude)
    taken: set[str] = set()
    found = []
    named = sorted((graph.op(n) for n in kernel_ops if n in graph), key=lambda op: op.index)
    for node in named:
        if node.kind != COMPUTE or not is_fused(kernel_ops[node.name], node.op_type):
            continue
        group, stack = {node.name}, list(graph.predecessors(node.name))
        while stack:
            p = stack.pop()
            if p in ran or p in exclude or p in taken or p in group or graph.op(p).kind != COMPUTE:
                continue
            group.add(p)
            stack.extend(graph.predecessors(p))
        if _ONEDNN_PREFIX.sub("", kernel_ops[node.name]) in SIBLING_FUSIONS:
            wanted = SIBLING_FUSIONS[_ONEDNN_PREFIX.sub("", kernel_ops[node.name])]
            preds = set(graph.predecessors(node.name))
            group |= {s for p in preds for s in graph.successors(p)
                      if graph.op(s).op_type == wanted and s not in ran and s not in taken
                      and set(graph.predecessors(s)) <= preds}
        if len(group) < 2:
            continue  # a kernel renamed but alone (e.g. HostConst for a Const): nothing to split
        members = sorted(group, key=lambda n: graph.op(n).index)
        work = max(members, key=lambda n: _work_rank(graph, n))
        taken.update(members)
        found.append(Fusion(kernel=node.name, kernel_op=kernel_ops[node.name], work=work,
                            members=tuple(members), member_types=tuple(graph.op(n).op_type for n in members)))
    return found


def split_fused(graph: Graph, samples: Mapping[str, list], kernel_ops: Mapping[str, str],
                exclude: Collection[str] = ()) -> tuple[dict[str, list], dict[str, Fusion]]:
    """Per-kernel time samples → per-DAG-op samples, splitting fused kernels (module docstring).

    Parameters
    ----------
    graph : Graph
    samples : mapping
        Node name a kernel carries → its times (seconds, one per run). Names
        that are not compute ops of ``graph`` pass through unchanged.
    kernel_ops : mapping
        Node name → kernel op type (see :func:`find_fusions`); names missing
        here are taken as plain kernels.
    exclude : collection of str
        Compute ops never folded into a kernel (fed placeholders).

    Returns
    -------
    (dict, dict)
        ``{op: [seconds, …]}``: each fusion's ``work`` op gets the kernel's
        samples, every other member as many zeros; and ``{op: Fusion}`` for the
        members that got zeros.
    """
    out = {k: list(v) for k, v in samples.items()}
    fused: dict[str, Fusion] = {}
    for f in find_fusions(graph, kernel_ops, [n for n in samples if n in graph], exclude):
        times = out[f.kernel]
        for m in f.members:
            out[m] = list(times) if m == f.work else [0.0] * len(times)
            if m != f.work:
                fused[m] = f
    return out, fused
