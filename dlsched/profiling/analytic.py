"""The analytic oracle: a deterministic roofline estimate per op.

``time = max(FLOPs / peak, bytes moved / memory bandwidth) + launch overhead``
for compute ops (FLOPs and bytes from :mod:`dlsched.profiling.flops`), and
``latency + bytes / network bandwidth`` for transfers. Profiles are noisy and
CI machines have no GPU; this oracle is what ``dlsched snapshot``/``check``
gate on. Ops the cost model cannot cost (a type it does not know, or shapes
the graph does not record) are returned as untimed with the reason, never
silently given zero.
"""
from __future__ import annotations

import pandas as pd

from dlsched.dag import COMPUTE, Graph

from .device_specs import DeviceSpec
from .flops import explain_cost
from .schema import oracle_frame, oracle_row


def analytic_oracle(graph: Graph, spec: DeviceSpec, transfers: bool = True) -> tuple[pd.DataFrame, dict[str, str]]:
    """Estimate every op's time on ``spec`` (compute ops only when ``transfers`` is false).

    Returns
    -------
    (DataFrame, dict)
        Oracle rows (``op, time, runs, median, op_type, resource, source,
        flops, bytes_moved``; ``source`` is ``analytic``) and ``{op: reason}``
        for compute ops that could not be costed.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> from dlsched.profiling.device_specs import BUILTIN
    >>> g, _ = random_dag(3, 2)
    >>> df, untimed = analytic_oracle(g, BUILTIN["cpu"])
    >>> sorted(untimed.values())[0]
    "no cost model for op type 'Fwd'"
    """
    rows, untimed = [], {}
    for op in graph.ops():
        if op.kind == COMPUTE:
            cost, why = explain_cost(graph, op)
            if cost is None:
                untimed[op.name] = why
                continue
            if cost.flops == 0 and cost.bytes == 0:
                t = 0.0  # views and shape bookkeeping launch no kernel (nor does an empty tensor)
            else:
                t = max(cost.flops / spec.peak_flops, cost.bytes / spec.memory_bandwidth) + spec.launch_overhead
            flops, moved = cost.flops, cost.bytes
        elif transfers:
            t = spec.network_latency + op.bytes / spec.network_bandwidth
            flops, moved = 0.0, float(op.bytes)
        else:  # the caller prices transfers on its own link
            continue
        rows.append(oracle_row(op, t, runs=0, source="analytic", flops=flops, bytes_moved=moved))
    return oracle_frame(rows, extra=["flops", "bytes_moved"]), untimed
