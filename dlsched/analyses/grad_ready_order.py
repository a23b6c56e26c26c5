"""The order in which a training step's parameter gradients become ready, as autograd's engine produces it.

DDP's reducer hangs a hook on each parameter's ``AccumulateGrad`` node and, in
the first iteration, records the order in which those hooks fire; it rebuilds
its buckets from that order (:mod:`.ddp_buckets`). So that order is what
decides DDP's buckets, and it is the engine's order, not the one a list
scheduler would pick.

How the engine orders its work (``torch/csrc/autograd/engine.cpp``): every
node becomes ready once all its inputs have arrived, and the ready queue pops
the node with the highest *sequence number* first. A node's sequence number
counts the autograd nodes made before it on its thread, so backward runs the
later forward ops first. ``AccumulateGrad`` is made with the largest sequence
number of all (``UINT64_MAX``), so a parameter's accumulation, and DDP's hook on
it, runs right after the node that delivered its last gradient contribution,
before any other node. A parameter used several times (a tied weight is one
parameter) is ready only after its last use's backward node ran. Several
parameters completed by one node (a convolution's weight and bias) are pushed
in the node's output order, and two tasks of equal priority leave libstdc++'s
binary heap in the order they entered it.

dlsched's training capture (:mod:`dlsched.importers.torch_importer`) is
``make_fx`` of ``torch.autograd.grad`` with respect to every parameter: it
runs this same engine, single-threaded on the CPU, and records each aten op
of backward in the order the engine executed it. A parameter's gradient op
(the one feeding its ``send``) is the last op of the node that completed it
(or the add that summed its contributions), so the order of those ops in the
capture is the order of the ``AccumulateGrad`` hooks. Ops are kept in capture
order as the graph's canonical index, so the order is read off the DAG. One
exception: parameters completed by one node are ready in the node's input
order, while the capture holds them in the order its formula computed them
(``addmm(bias, x, weight)``, GPT-2's Conv1D, computes the weight's gradient
before the bias's broadcast sum, yet the bias is ready first); those are put
back in the forward op's argument order (:func:`_engine_keys`). The loss must
be the one DDP's step minimises (the importer's
:func:`dlsched.factory.training_loss`).

Limits: a parameter whose gradient is an earlier tensor passed on unchanged
(added to a tensor of its own shape, so no broadcast sum is recorded) has no
op of its own in the capture, and is placed at that tensor's producer, perhaps
too early. On a GPU the engine runs a device's nodes from one queue of the same
priority, so one GPU per process keeps this order (ResNet-18's buckets equal a
public 8-GPU ROCm trace's, ``tests/test_ddp_buckets.py``); a model spread over
several devices has one queue each, which this order does not model.

A DAG not captured that way (ONNX, TensorFlow, a synthetic DAG) has no
recorded engine order: there the order is the one a free-transfer simulation
of the step produces (:func:`.simulate.simulate`), gradient by gradient.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(8, 4, training=True, seed=1)
>>> order = ready_order(g, t)
>>> sorted(order) == sorted(op.param for op in g.sends())
True
"""
from __future__ import annotations

from typing import Mapping

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError

from .simulate import simulate


def engine_recorded(graph: Graph) -> bool:
    """Whether ``graph``'s op order is autograd's execution order: a torch training step captured by ``make_fx``.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> engine_recorded(random_dag(6, 3, training=True, seed=0)[0])
    False
    """
    return graph.mode == "training" and graph.capture == "make_fx" and (graph.source or {}).get("format") == "torch"


def _engine_keys(graph: Graph, sends: list) -> dict[str, tuple[int, int]]:
    """Parameter → (where the capture produced its gradient, its place among those one node completed).

    A node completing several parameters at once pushes their ``AccumulateGrad`` tasks in the order
    of its inputs, which need not be the order its formula computed them in (``addmm`` computes its
    ``mat2`` gradient before the bias's, whose broadcast sum comes last). Parameters read by one
    forward op alone, whose gradients the capture produced with no other parameter's between them,
    were completed by that op's node (or a view of one of them, folded into its recv, right after
    it): they are ready together, in the op's argument order (matched by shape; a parameter read
    through a view matches none and comes last, as its view's node runs after).
    """
    at = {}
    for send in sends:
        preds = [graph.op(p) for p in graph.predecessors(send.name)]
        at[send.param] = max((p.index for p in preds if p.kind == COMPUTE), default=-1)
    key = {p: (i, 0) for p, i in at.items()}
    readers: dict[str, list[str]] = {}
    for p in at:
        fwd = [s for s in graph.successors(p) if graph.op(s).kind == COMPUTE and graph.op(s).phase == "forward"]
        if len(fwd) == 1:
            readers.setdefault(fwd[0], []).append(p)
    positions = sorted(at.values())
    for op_name, group in readers.items():
        if len(group) < 2:
            continue
        lo, hi = min(at[p] for p in group), max(at[p] for p in group)
        if sum(lo <= i <= hi for i in positions) != len(group):  # another parameter's gradient came between
            continue
        free = list(graph.op(op_name).input_shapes)
        for p in sorted(group, key=lambda q: graph.op(q).index):
            shape = list(graph.op(p).shape or [])
            arg = next((i for i, s in enumerate(free) if s is not None and list(s) == shape), len(free))
            if arg < len(free):
                free[arg] = None  # a second parameter of the same shape takes the next argument
            key[p] = (hi, arg)
    return key


def ready_order(graph: Graph, times: Mapping[str, float] | None = None) -> list[str]:
    """Parameter names (their recv ops) in the order their gradients become ready (module docstring).

    Parameters
    ----------
    graph : Graph
        A training graph (one ``send`` per trained parameter).
    times : mapping, optional
        Op name → seconds, for graphs without a recorded engine order (the
        simulation's order); every compute op counts 1 when not given.

    Returns
    -------
    list of str
        Each trained parameter once, first ready first.

    Raises
    ------
    DlschedError
        The graph has no gradients (an inference graph).
    """
    sends = graph.sends()
    if not sends:
        raise DlschedError(f"{graph.name} has no gradients: it is an inference graph; load it with --mode training")
    recv_index = {op.name: op.index for op in graph.recvs()}
    if engine_recorded(graph):
        key = _engine_keys(graph, sends)
        ordered = sorted(sends, key=lambda s: (*key[s.param], recv_index.get(s.param, 0)))
    else:
        free = {op.name: 0.0 if op.kind != COMPUTE else float(times[op.name]) if times is not None else 1.0
                for op in graph.ops()}
        end = simulate(graph, free, unordered="canonical").end
        ordered = sorted(sends, key=lambda s: (end[s.name], s.index))
    return [s.param for s in ordered]
