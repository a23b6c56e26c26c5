"""Algorithm tables: each layer's algorithms, with their time and workspace at each batch (CSV).

The input of :func:`dlsched.planning.fastest_batch.fastest_batch` (paper
``003_*`` §3.1.2–3.1.3). One row per layer, algorithm and batch:

- ``layer``: the layer's name; layers run in their order of first appearance;
- ``algorithm``: the algorithm's name (``gemm``, ``fft``, ``winograd`` …);
- ``batch``: the batch size, a whole number ≥ 1;
- ``time_s``: seconds per training step of this layer with this algorithm, > 0;
- ``workspace_bytes``: the scratch memory the algorithm needs at this batch, ≥ 0.

Every layer has at least one algorithm at every batch the file lists (a layer
with a single algorithm simply adds its time); other columns are kept and
ignored. The rows can come from a paper's ratios
(:mod:`dlsched.planning.paper_alexnet`), a user's measurements, or a GPU run.

Examples
--------
>>> import pandas as pd
>>> rows = [("conv1", "gemm", 32, 0.010, 1e8), ("conv1", "fft", 32, 0.005, 1e9)]
>>> table = validate_algorithm_table(pd.DataFrame(rows, columns=COLUMNS))
>>> table.dtypes["batch"], len(table)
(dtype('int64'), 2)
>>> validate_algorithm_table(pd.DataFrame(rows[:1] * 2, columns=COLUMNS), "t.csv")
Traceback (most recent call last):
...
dlsched.errors.DlschedError: t.csv: 1 row(s) repeat a layer, algorithm and batch (row 2: conv1, gemm, batch 32); ...
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.errors import DlschedError

from dlsched.atomic import atomic_open

COLUMNS = ("layer", "algorithm", "batch", "time_s", "workspace_bytes")


def write_algorithm_table(table: pd.DataFrame, path: str | Path) -> None:
    """Validate ``table`` and write it atomically as CSV (its :data:`COLUMNS` first)."""
    table = validate_algorithm_table(table, str(path))
    extra = [c for c in table.columns if c not in COLUMNS]
    with atomic_open(path, "w") as f:
        table[list(COLUMNS) + extra].to_csv(f, index=False, float_format="%.9g")


def read_algorithm_table(path: str | Path) -> pd.DataFrame:
    """Load and validate an algorithm table CSV.

    Raises
    ------
    DlschedError
        A missing or unreadable file, or any problem
        :func:`validate_algorithm_table` finds, with the file's name.
    """
    path = Path(path)
    if not path.is_file():
        raise DlschedError(f"{path}: no such algorithm table" + (" (it is a directory)" if path.is_dir() else ""))
    try:
        table = pd.read_csv(path, dtype={"layer": str, "algorithm": str})
    except pd.errors.EmptyDataError:
        raise DlschedError(f"{path}: the algorithm table is empty; it needs a header "
                           f"({', '.join(COLUMNS)}) and one row per layer, algorithm and batch") from None
    except Exception as e:  # pandas raises many types for malformed input
        raise DlschedError(f"{path}: cannot read the algorithm table ({type(e).__name__}: {e})") from None
    return validate_algorithm_table(table, str(path))


def _rows(table: pd.DataFrame, mask, limit: int = 3) -> str:
    """``row 3: conv1, fft, batch 32; …`` for the first rows where ``mask`` holds (1-based data rows)."""
    picked = table[np.asarray(mask)].head(limit)
    return "; ".join(f"row {i + 1}: {r.layer}, {r.algorithm}, batch {r.batch}"
                     for i, r in zip(picked.index, picked.itertuples(index=False)))


def validate_algorithm_table(table: pd.DataFrame, where: str = "algorithm table") -> pd.DataFrame:
    """The table with typed columns (``batch`` int, ``time_s`` and ``workspace_bytes`` float), rows in file order.

    Raises
    ------
    DlschedError
        Missing columns, no rows, an empty layer or algorithm name, a batch
        that is not a whole number ≥ 1, a time that is not a finite number
        above 0, a workspace that is not a finite number ≥ 0, a repeated
        (layer, algorithm, batch), or a layer missing at a batch the table lists.
    """
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise DlschedError(f"{where}: the algorithm table lacks the column(s) {', '.join(missing)}; it needs "
                           f"{', '.join(COLUMNS)} and has {', '.join(map(str, table.columns)) or 'none'}")
    if table.empty:
        raise DlschedError(f"{where}: the algorithm table has no rows; it needs one per layer, algorithm and batch")
    out = table.reset_index(drop=True).copy()
    for col in ("layer", "algorithm"):
        blank = out[col].isna() | (out[col].astype(str).str.strip() == "")
        if blank.any():
            raise DlschedError(f"{where}: {blank.sum()} row(s) have no {col} name (first: row {blank.idxmax() + 1})")
        out[col] = out[col].astype(str).str.strip()
    numbers = {c: pd.to_numeric(out[c], errors="coerce").astype(float) for c in ("batch", "time_s", "workspace_bytes")}
    b = numbers["batch"]
    bad = ~(np.isfinite(b) & (b >= 1) & (b == np.floor(b)))
    if bad.any():
        raise DlschedError(f"{where}: {bad.sum()} row(s) have a batch that is not a whole number ≥ 1 "
                           f"(first: row {bad.idxmax() + 1}, batch {out['batch'][bad.idxmax()]!r})")
    out["batch"] = b.astype(np.int64)
    for col, rule, ok in (("time_s", "a finite number of seconds above 0", lambda v: v > 0),
                          ("workspace_bytes", "a finite number of bytes ≥ 0", lambda v: v >= 0)):
        v = numbers[col]
        bad = ~(np.isfinite(v) & ok(v))
        if bad.any():
            raise DlschedError(f"{where}: {bad.sum()} row(s) have a {col} that is not {rule} "
                               f"({_rows(out, bad)}; value {table[col].iloc[bad.idxmax()]!r})")
        out[col] = v
    dup = out.duplicated(["layer", "algorithm", "batch"])
    if dup.any():
        raise DlschedError(f"{where}: {dup.sum()} row(s) repeat a layer, algorithm and batch ({_rows(out, dup)}); "
                           "each must appear once")
    present = pd.crosstab(out["layer"], out["batch"]) > 0
    if not present.values.all():
        gaps = [(layer, batch) for layer, row in present.iterrows() for batch, ok in row.items() if not ok]
        listed = ", ".join(f"{layer} at batch {batch}" for layer, batch in gaps[:5])
        raise DlschedError(f"{where}: {len(gaps)} layer/batch pair(s) have no algorithm ({listed}"
                           f"{' …' if len(gaps) > 5 else ''}); every layer needs at least one algorithm at every "
                           "batch the table lists")
    return out
