"""An oracle mapped onto its model: the mode, batch and other-model checks (DESIGN §3).

Every consumer maps an oracle onto its model with :func:`oracle_times`, which
refuses one recorded in another mode or at another batch than the model's
(``--rescale-batch`` scales its compute times linearly instead, with a
warning). Oracles without the record (older ones, hand-written ones) are
used as they are. The file itself is :mod:`dlsched.formats.oracle_file`.

Examples
--------
>>> import tempfile, pathlib, warnings
>>> import pandas as pd
>>> from dlsched.dag import Graph, COMPUTE
>>> from dlsched.formats.oracle_file import write_oracle
>>> g = Graph("m", "training", {"batch": 4}); _ = g.add_op("conv", COMPUTE)
>>> path = pathlib.Path(tempfile.mkdtemp()) / "o.csv"
>>> write_oracle(pd.DataFrame({"op": ["conv"], "time": [0.5]}), path, meta={"batch": 2, "mode": "training"})
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

import warnings
from pathlib import Path

import pandas as pd

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError, DlschedWarning, OracleError
from dlsched.formats.oracle_file import oracle_meta, read_oracle
from dlsched.graph_batch import graph_batch


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
    (:func:`~dlsched.graph_batch.graph_batch`); ``None`` for a symbolic batch.

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
    try:
        return graph_batch(graph), " (its example inputs; pass --batch to choose)"
    except DlschedError:
        return None, ""


def load_times(path: str | Path, graph: Graph, default_time: float | None = None, *, rescale_batch: bool = False,
               any_batch: bool = False) -> dict[str, float]:
    """:func:`read_oracle` then :func:`oracle_times`, naming the file in errors."""
    return oracle_times(read_oracle(path), graph, default_time, where=str(path), rescale_batch=rescale_batch,
                        any_batch=any_batch)
