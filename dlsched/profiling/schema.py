"""The time oracle's rows: one row per op, the table of them (DESIGN §3).

Every source of an oracle (the torch, ONNX and TF profilers, trace import,
the network model, the analytic roofline, ``--default-time``) builds its rows
with :func:`oracle_row` and its table with :func:`oracle_frame`, in the
columns of :mod:`dlsched.formats.oracle_file`; every reader checks times with
:func:`dlsched.op_times.is_valid_time`. So the columns and the rule for a
valid time are written once.

Examples
--------
>>> from dlsched.dag import Graph, COMPUTE
>>> g = Graph("m"); op = g.add_op("conv", COMPUTE, op_type="Conv")
>>> df = oracle_frame([oracle_row(op, 2e-3, runs=5, median=2.5e-3, source="profiled")])
>>> list(df.columns) == list(COLUMNS), df["runs"].dtype.name
(True, 'int64')
"""
from __future__ import annotations

import numbers
from typing import Any, Iterable

from dlsched.dag import Op
from dlsched.errors import DlschedError
from dlsched.formats.oracle_file import COLUMNS


def check_threads(threads: Any) -> None:
    """Refuse an intra-op thread count a profiler cannot use (``--threads``): it must be a whole number ≥ 1."""
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise DlschedError(f"--threads must be a whole number of at least 1, got {threads!r}")


def oracle_row(op: Op, time: float, *, runs: int, source: str, median: float | None = None, **extra: Any) -> dict:
    """One oracle row for ``op``: its time (the minimum over ``runs``), median, type, resource and source.

    ``extra`` columns (``bytes`` for transfers, ``flops`` for the analytic
    oracle) follow the schema's.
    """
    return {"op": op.name, "time": float(time), "runs": int(runs),
            "median": float(time if median is None else median), "op_type": op.op_type or op.kind,
            "resource": op.resource, "source": source, **extra}


def oracle_frame(rows: Iterable[dict], extra: Iterable[str] = ()):
    """The rows of :func:`oracle_row` as a DataFrame with the schema's columns first (``runs`` as int64)."""
    import pandas as pd  # here, so that the analyses' time checks above do not load pandas

    df = pd.DataFrame(list(rows), columns=[*COLUMNS, *extra])
    df["runs"] = df["runs"].astype("int64")
    return df
