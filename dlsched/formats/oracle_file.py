"""Time-oracle files: ``Time(op)`` per op, as CSV (default) or Parquet.

Columns (DESIGN §3): ``op`` (node name) and ``time`` (seconds, the minimum
over runs) are required; the profiler also writes ``runs``, ``median``,
``op_type``, ``resource`` and ``source`` (``profiled``, ``network-model``,
``trace``, ``analytic``), and what the times were measured at
(:data:`META_COLUMNS`: ``batch``, ``mode``,
``device``, ``threads``, ``dlsched_version``), the same value on every row so
that the record travels with the file in either format.

Mapping an oracle onto its model (the mode, batch and other-model checks) is
:mod:`dlsched.profiling.oracle_times`.

Examples
--------
>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "o.csv"
>>> write_oracle(pd.DataFrame({"op": ["conv"], "time": [0.5]}), path, meta={"batch": 2, "mode": "training"})
>>> oracle_meta(read_oracle(path))
{'batch': 2, 'mode': 'training'}
"""
from __future__ import annotations

import hashlib
import math
import numbers
from pathlib import Path

import pandas as pd

from dlsched.atomic import atomic_open, atomic_path
from dlsched.dag import MODES
from dlsched.errors import OracleError
from dlsched.op_times import MAX_OP_SECONDS, is_valid_time

COLUMNS = ("op", "time", "runs", "median", "op_type", "resource", "source")
SOURCES = ("profiled", "network-model", "trace", "analytic", "default")
# What the times were measured at: the batch the model ran at, its mode, the device, the intra-op threads and the
# dlsched that wrote them. The same value on every row, so that a CSV stays one plain table and the record travels
# with the file in both formats; absent from older and hand-written oracles.
META_COLUMNS = ("batch", "mode", "device", "threads", "dlsched_version")


def write_oracle(df: pd.DataFrame, path: str | Path, meta: dict | None = None) -> None:
    """Write an oracle DataFrame atomically; ``*.parquet`` gives Parquet, else CSV.

    ``meta`` (keys of :data:`META_COLUMNS`; ``None``
    values are left out) becomes constant columns after the others.
    """
    record = {k: v for k, v in (meta or {}).items() if v is not None}
    unknown = sorted(set(record) - set(META_COLUMNS))
    if unknown:
        raise ValueError(f"not oracle metadata: {', '.join(unknown)}")
    df = df.assign(**record)
    validate_frame(df, str(path))
    cols = [c for c in COLUMNS if c in df.columns]
    cols += [c for c in df.columns if c not in COLUMNS and c not in META_COLUMNS]
    df = df[cols + [c for c in META_COLUMNS if c in df.columns]]
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
    oracle_meta(df, where)


def oracle_meta(df: pd.DataFrame, where: str = "oracle") -> dict:
    """What an oracle records it was measured at: ``{column: value}`` for the metadata columns it fills.

    ``batch`` and ``threads`` are positive integers, ``mode`` is ``inference``
    or ``training``, ``device`` and ``dlsched_version`` are text. An oracle
    without them (written before they existed, or by hand) gives ``{}``.

    Raises
    ------
    OracleError
        A value that is not of its kind, or rows that disagree (oracles of
        different runs joined into one file).
    """
    meta = {}
    for col in META_COLUMNS:
        if col not in df.columns:
            continue
        values = pd.unique(df[col].dropna())
        if len(values) > 1:
            raise OracleError(f"{where}: its rows disagree on {col} ({', '.join(map(str, values[:3]))}): it joins "
                              "oracles of different runs; profile the model once at the setting wanted")
        if not len(values):
            continue
        value = values[0]
        if col in ("batch", "threads"):
            if not isinstance(value, numbers.Real) or isinstance(value, bool) or not _positive_int(value):
                raise OracleError(f"{where}: its {col} column holds {value!r}; it must be a positive whole number")
            value = int(value)
        elif col == "mode" and value not in MODES:
            raise OracleError(f"{where}: its mode column holds {value!r}; it must be one of {', '.join(MODES)}")
        else:
            value = str(value)
        meta[col] = value
    return meta


def _positive_int(value: numbers.Real) -> bool:
    return math.isfinite(value) and value >= 1 and float(value).is_integer()


def oracle_hash(times: dict[str, float]) -> str:
    """A short hash of an oracle's contents (recorded in priority files)."""
    h = hashlib.sha256()
    for name in sorted(times):
        h.update(f"{name}\x00{times[name]:.9g}\x01".encode())
    return h.hexdigest()[:16]


def oracle_batch(path: str | Path) -> int | None:
    """The batch an oracle file records it was profiled at; ``None`` when it records none."""
    return oracle_meta(read_oracle(path), str(path)).get("batch")
