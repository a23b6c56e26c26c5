"""The batch a graph was imported at, read from its record or its forward shapes.

The oracle check (a time measured at batch 8 describes batch 8) and the
memory model both need it, so it sits below both.
"""
from __future__ import annotations

from collections import Counter

from dlsched.dag import Graph
from dlsched.errors import DlschedError


def floating(op) -> bool:
    """``op``'s first output is floating point (or of unknown dtype); shape arithmetic is not."""
    return not op.dtypes or str(op.dtypes[0]).replace("torch.", "").startswith(("float", "bfloat", "half", "double"))


def unknown_batch(op) -> bool:
    """``op``'s first output is a floating-point tensor of rank ≥ 2 whose first dimension is unknown."""
    shape = (op.output_shapes or [None])[0]
    return bool(shape) and len(shape) >= 2 and shape[0] is None and floating(op)


def symbolic_batch_error(graph: Graph, count: int) -> DlschedError:
    return DlschedError(
        f"model {graph.name!r} has a symbolic batch dimension: {count} of its forward tensors have no batch size, "
        "so their memory cannot be counted (a plan would treat them as empty and answer an absurd batch). "
        "Pass --batch N to import it at a fixed batch; the plan scales linearly from it, so N=1 will do.")


def graph_batch(graph: Graph) -> int:
    """The batch size a graph was imported at.

    Taken from ``graph.source["batch"]`` when the importer recorded it, else the
    most common leading dimension of the forward floating-point outputs of
    rank ≥ 2 (shape arithmetic such as ``Shape → [3]`` is not a batch).

    Raises
    ------
    DlschedError
        When neither is available, or the batch dimension is symbolic
        (unknown leading dimensions): the message asks for ``--batch``.

    Examples
    --------
    >>> from dlsched.dag import COMPUTE, Graph
    >>> g = Graph("m", "training")
    >>> _ = g.add_op("conv", COMPUTE, output_shapes=[[None, 64, 56, 56]], dtypes=["float32"])
    >>> graph_batch(g)
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: model 'm' has a symbolic batch dimension: 1 of its forward tensors have no batch size, so their memory cannot be counted (a plan would treat them as empty and answer an absurd batch). Pass --batch N to import it at a fixed batch; the plan scales linearly from it, so N=1 will do.
    """
    b = graph.source.get("batch") if graph.source else None
    if b:
        return int(b)
    forward = [op for op in graph.compute_ops() if op.phase == "forward"]
    symbolic = sum(unknown_batch(op) for op in forward)
    if symbolic:
        raise symbolic_batch_error(graph, symbolic)
    lead = Counter(int(s[0]) for op in forward for s in (op.output_shapes or [])[:1]
                   if s and len(s) >= 2 and s[0] is not None and floating(op))
    if not lead:
        raise DlschedError(f"model {graph.name!r}: cannot tell the graph's batch size (no output shapes and no "
                           "recorded batch); pass --batch")
    return lead.most_common(1)[0][0]
