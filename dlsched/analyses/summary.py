"""A model's summary figures, as ``dlsched inspect`` prints them."""
from __future__ import annotations

from collections import Counter

from dlsched.dag import Graph


def size_figures(graph: Graph) -> dict:
    """Op and transfer counts and parameter totals: ``ops``, ``compute_ops``,
    ``recv_ops``, ``send_ops``, ``param_count``, ``param_bytes``."""
    return {
        "ops": len(graph),
        "compute_ops": len(graph.compute_ops()),
        "recv_ops": len(graph.recvs()),
        "send_ops": len(graph.sends()),
        "param_count": graph.param_count,
        "param_bytes": graph.param_bytes,
    }


def summarize(graph: Graph) -> dict:
    """Counts, parameter totals, roots/leaves, longest path and fingerprint.

    Returns
    -------
    dict
        Keys ``ops``, ``compute_ops``, ``recv_ops``, ``send_ops``,
        ``param_count``, ``param_bytes``, ``roots``, ``leaves``,
        ``longest_path``, ``op_types`` (compute op type → count, most common
        first), ``parameter_servers``, ``mode``, ``name``, ``fingerprint`` and
        ``capture`` (how a torch graph was captured, ``symbolic_trace`` or
        ``make_fx``; ``None`` for other formats), and for an ONNX file that
        torch's exporter optimised, ``exporter_folded`` (how many of the
        module's parameters it folded into others, by which rules).
    """
    g = graph.nx
    types = Counter(op.op_type or "?" for op in graph.compute_ops())
    return {
        "name": graph.name,
        "mode": graph.mode,
        **size_figures(graph),
        "roots": sum(1 for n in g if g.in_degree(n) == 0),
        "leaves": sum(1 for n in g if g.out_degree(n) == 0),
        "longest_path": graph.longest_path_ops(),
        "op_types": dict(sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))),
        "parameter_servers": graph.ps_count,
        "fingerprint": graph.fingerprint(),
        "capture": graph.capture,
        # An optimised ONNX export's folded parameters: the figures are for the folded model.
        **({"exporter_folded": graph.source["exporter_folded"]} if (graph.source or {}).get("exporter_folded")
           else {}),
    }
