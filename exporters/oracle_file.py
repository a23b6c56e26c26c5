"""Time-oracle files: ``Time(op)`` per op, as CSV (default) or Parquet.

Columns (DESIGN §3): ``op`` (node name) and ``time`` (seconds, the minimum
over runs) are required; the profiler also writes ``runs``, ``median``,
``op_type``, ``resource`` and ``source`` (``profiled``, ``network-model``,
``trace``, ``analytic``).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from dlsched.dag import Graph
from dlsched.errors import OracleError
from dlsched.profiling.schema import COLUMNS, MAX_OP_SECONDS, is_valid_time

from .atomic import atomic_open, atomic_path



def write_oracle(df: pd.DataFrame, path: str | Path) -> None:
    """Write an oracle DataFrame atomically; ``*.parquet`` gives Parquet, else CSV."""
    validate_frame(df, str(path))
    cols = [c for c in COLUMNS if c in df.columns] + [c for c in df.columns if c not in COLUMNS]
    df = df[cols]
    if str(path).endswith(".parquet"):
        with atomic_path(path) as tmp:
            df.to_parquet(tmp, index=False)
    else:
        with atomic_open(path, "w") as f:
            df.to_csv(f, index=False, float_format="%.9g")


def read_oracle(path: str | Path) -> pd.DataFrame:
    """Load and validate an oracle file.

    Raises
    ------
    OracleError
        Missing file, unreadable content, missing ``op``/``time`` columns,
        duplicate ops, or times that are negative, NaN or not numbers.
    """
    path = Path(path)
    if not path.exists():
        raise OracleError(f"{path}: no such oracle file")
    try:
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path)
    except Exception as e:  # pandas raises many types for malformed input
        raise OracleError(f"{path}: cannot read the oracle file ({type(e).__name__}: {e})") from None
    validate_frame(df, str(path))
    return df


def validate_frame(df: pd.DataFrame, where: str = "oracle") -> None:
    missing = [c for c in ("op", "time") if c not in df.columns]
    if missing:
        raise OracleError(
            f"{where}: the oracle lacks the required column(s) {', '.join(missing)}; "
            f"an oracle needs 'op' (node name) and 'time' (seconds); it has: {', '.join(map(str, df.columns))}")
    times = pd.to_numeric(df["time"], errors="coerce")
    bad = df.loc[~times.apply(is_valid_time), "op"]
    if len(bad):
        sample = ", ".join(map(str, bad.head(5)))
        raise OracleError(f"{where}: {len(bad)} op(s) have a time that is negative, NaN, not a number or above "
                          f"{MAX_OP_SECONDS:.0f} s (e.g. {sample}); times must be in seconds")
    dup = df["op"][df["op"].duplicated()]
    if len(dup):
        raise OracleError(f"{where}: op(s) listed more than once: {', '.join(map(str, dup.head(5)))}")


def oracle_hash(times: dict[str, float]) -> str:
    """A short hash of an oracle's contents (recorded in priority files)."""
    h = hashlib.sha256()
    for name in sorted(times):
        h.update(f"{name}\x00{times[name]:.9g}\x01".encode())
    return h.hexdigest()[:16]


def oracle_times(df: pd.DataFrame, graph: Graph, default_time: float | None = None,
                 where: str = "oracle") -> dict[str, float]:
    """Map every op of ``graph`` to its time from an oracle DataFrame.

    Parameters
    ----------
    default_time : float, optional
        Time given to ops the oracle lacks. Without it, a missing op is an error.

    Raises
    ------
    OracleError
        The oracle misses ops (they are named), or it was made for another
        model (most of its ops are unknown to ``graph``).
    """
    table = dict(zip(df["op"].astype(str), pd.to_numeric(df["time"]).astype(float)))
    names = [op.name for op in graph.ops()]
    missing = [n for n in names if n not in table]
    if missing and default_time is None:
        unknown = [n for n in table if n not in graph]
        if unknown and len(unknown) >= len(table) / 2:
            raise OracleError(
                f"{where} does not belong to model {graph.name!r}: {len(unknown)} of its {len(table)} ops are not "
                f"in the model (e.g. {', '.join(unknown[:3])}) and {len(missing)} of the model's ops are missing; "
                "it was probably made for another model or another --mode. Re-run dlsched profile on this model.")
        raise OracleError(
            f"{where} misses {len(missing)} of the model's {len(names)} ops: {', '.join(missing[:10])}"
            f"{' …' if len(missing) > 10 else ''}. Profile them, or pass --default-time to fill the gaps.")
    return {n: table.get(n, default_time) for n in names}


def load_times(path: str | Path, graph: Graph, default_time: float | None = None) -> dict[str, float]:
    """:func:`read_oracle` then :func:`oracle_times`, naming the file in errors."""
    return oracle_times(read_oracle(path), graph, default_time, where=str(path))
