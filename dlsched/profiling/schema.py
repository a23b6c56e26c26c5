"""The time oracle's schema: its columns, one row, and what a valid time is (DESIGN §3).

Every source of an oracle (the torch, ONNX and TF profilers, trace import,
the network model, the analytic roofline, ``--default-time``) builds its rows
with :func:`oracle_row` and its table with :func:`oracle_frame`; every reader
checks times with :func:`is_valid_time`. So the columns and the rule for a
valid time are written once.

Examples
--------
>>> from dlsched.dag import Graph, COMPUTE
>>> g = Graph("m"); op = g.add_op("conv", COMPUTE, op_type="Conv")
>>> df = oracle_frame([oracle_row(op, 2e-3, runs=5, median=2.5e-3, source="profiled")])
>>> list(df.columns) == list(COLUMNS), df["runs"].dtype.name
(True, 'int64')
>>> is_valid_time(1e-3), is_valid_time(-1.0), is_valid_time(float("nan")), is_valid_time(1e307), is_valid_time(True)
(True, False, False, False, False)
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

from dlsched.dag import Op
from dlsched.errors import DlschedError

COLUMNS = ("op", "time", "runs", "median", "op_type", "resource", "source")
SOURCES = ("profiled", "network-model", "trace", "analytic", "default")
# What the times were measured at: the batch the model ran at, its mode, the device, the intra-op threads and the
# dlsched that wrote them. The same value on every row, so that a CSV stays one plain table and the record travels
# with the file in both formats; absent from older and hand-written oracles.
META_COLUMNS = ("batch", "mode", "device", "threads", "dlsched_version")
# A day per op is already absurd; far larger times overflow the sums that bounds and simulation take.
MAX_OP_SECONDS = 86_400.0


def is_valid_time(t: Any) -> bool:
    """Seconds an op can take: a finite number in ``[0, MAX_OP_SECONDS]``, not a bool."""
    # numbers.Real also admits numpy scalars (a CSV's integer column reads as int64).
    return isinstance(t, numbers.Real) and not isinstance(t, bool) and math.isfinite(t) and 0 <= t <= MAX_OP_SECONDS


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
