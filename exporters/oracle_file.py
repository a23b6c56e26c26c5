"""Time-oracle files: ``Time(op)`` per op, as CSV (default) or Parquet.

Columns (DESIGN §3): ``op`` (node name) and ``time`` (seconds, the minimum
over runs) are required; the profiler also writes ``runs``, ``median``,
``op_type``, ``resource`` and ``source`` (``profiled``, ``network-model``,
``trace``, ``analytic``), and what the times were measured at
(:data:`~dlsched.profiling.schema.META_COLUMNS`: ``batch``, ``mode``,
``device``, ``threads``, ``dlsched_version``), the same value on every row so
that the record travels with the file in either format.

Every consumer maps an oracle onto its model with :func:`oracle_times`, which
refuses one recorded in another mode or at another batch than the model's
(``--rescale-batch`` scales its compute times linearly instead, with a
warning). Oracles without the record (older ones, hand-written ones) are
used as they are.

Examples
--------
>>> import tempfile, pathlib, warnings
>>> from dlsched.dag import Graph, COMPUTE
>>> g = Graph("m", "training", {"batch": 4}); _ = g.add_op("conv", COMPUTE)
>>> path = pathlib.Path(tempfile.mkdtemp()) / "o.csv"
>>> write_oracle(pd.DataFrame({"op": ["conv"], "time": [0.5]}), path, meta={"batch": 2, "mode": "training"})
>>> oracle_meta(read_oracle(path))
{'batch': 2, 'mode': 'training'}
>>> load_times(path, g)
Traceback (most recent call last):
...
dlsched.errors.OracleError: ... was profiled at batch 2, but the model is at batch 4, ...
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     load_times(path, g, rescale_batch=True)
{'conv': 1.0}
>>> str(caught[0].message).split("; ", 1)[1]
'its compute times are scaled ×2 to batch 4 (linear in batch; transfers unchanged)'
"""
from __future__ import annotations

import hashlib
import math
import numbers
import warnings
from pathlib import Path

import pandas as pd

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError, DlschedWarning, OracleError
from dlsched.loader import MODES
from dlsched.profiling.schema import COLUMNS, MAX_OP_SECONDS, META_COLUMNS, is_valid_time

from .atomic import atomic_open, atomic_path


def write_oracle(df: pd.DataFrame, path: str | Path, meta: dict | None = None) -> None:
    """Write an oracle DataFrame atomically; ``*.parquet`` gives Parquet, else CSV.

    ``meta`` (keys of :data:`~dlsched.profiling.schema.META_COLUMNS`; ``None``
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


def oracle_times(df: pd.DataFrame, graph: Graph, default_time: float | None = None,
                 where: str = "oracle", *, rescale_batch: bool = False, any_batch: bool = False) -> dict[str, float]:
    """Map every op of ``graph`` to its time from an oracle DataFrame.

    Parameters
    ----------
    default_time : float, optional
        Time given to ops the oracle lacks. Without it, a missing op is an error.
    rescale_batch : bool
        An oracle recorded at another batch than the model's
        (:func:`model_batch`) has its compute times scaled linearly to the
        model's batch (transfers unchanged), with a warning, instead of being
        refused.
    any_batch : bool
        The caller scales the times by batch itself (the batch planner): the
        batch is not checked.

    Raises
    ------
    OracleError
        The oracle was recorded in another mode, or at another batch (unless
        ``rescale_batch`` or ``any_batch``); it misses ops (they are named), or
        it was made for another model (most of its ops are unknown to ``graph``).
    """
    scale = _batch_scale(oracle_meta(df, where), graph, where, rescale_batch, any_batch)
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
    if scale != 1:  # only the oracle's own compute times: a --default-time is given for this model as it is
        table = {n: t * scale if n in graph and graph.op(n).kind == COMPUTE else t for n, t in table.items()}
    return {n: table.get(n, default_time) for n in names}


def _batch_scale(meta: dict, graph: Graph, where: str, rescale: bool, any_batch: bool) -> float:
    """The factor for the oracle's compute times on ``graph``: 1, or the ratio of batches when rescaling."""
    mode = meta.get("mode")
    if mode is not None and mode != graph.mode:
        raise OracleError(f"{where} was profiled in {mode} mode, but the model is loaded in {graph.mode} mode: its "
                          f"ops and times describe another graph. Pass --mode {mode}, or profile the model with "
                          f"--mode {graph.mode}.")
    profiled = meta.get("batch")
    if any_batch or profiled is None:
        return 1.0
    batch, how = model_batch(graph)
    if batch is None or batch == profiled:
        return 1.0
    if not rescale:
        raise OracleError(f"{where} was profiled at batch {profiled}, but the model is at batch {batch}{how}, so its "
                          f"times would describe batch {profiled}. Profile it again with --batch {batch}, or pass "
                          "--rescale-batch to scale its compute times linearly in batch (transfers unchanged).")
    scale = int(batch) / profiled
    warnings.warn(DlschedWarning(f"{where} was profiled at batch {profiled}; its compute times are scaled "
                                 f"×{scale:g} to batch {batch} (linear in batch; transfers unchanged)"), stacklevel=3)
    return scale


def model_batch(graph: Graph) -> tuple[int | None, str]:
    """The batch ``graph`` is at, and how it is known, for the oracle check: ``--batch`` (or a saved DAG's
    record), else, for a PyTorch factory, its example inputs' batch read from its shapes
    (:func:`~dlsched.planning.memory.graph_batch`); ``None`` for a symbolic batch.

    Examples
    --------
    >>> from dlsched.dag import Graph
    >>> model_batch(Graph("m", "inference", {"format": "onnx", "batch": 8})), model_batch(Graph("m"))
    ((8, ''), (None, ''))
    """
    source = graph.source or {}
    if source.get("batch"):
        return int(source["batch"]), ""
    if source.get("format") != "torch":  # other formats' shapes hold no batch when it is symbolic
        return None, ""
    from dlsched.planning.memory import graph_batch

    try:
        return graph_batch(graph), " (its example inputs; pass --batch to choose)"
    except DlschedError:
        return None, ""


def oracle_batch(path: str | Path) -> int | None:
    """The batch an oracle file records it was profiled at; ``None`` when it records none."""
    return oracle_meta(read_oracle(path), str(path)).get("batch")


def load_times(path: str | Path, graph: Graph, default_time: float | None = None, *, rescale_batch: bool = False,
               any_batch: bool = False) -> dict[str, float]:
    """:func:`read_oracle` then :func:`oracle_times`, naming the file in errors."""
    return oracle_times(read_oracle(path), graph, default_time, where=str(path), rescale_batch=rescale_batch,
                        any_batch=any_batch)
