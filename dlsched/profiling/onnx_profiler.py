"""Per-op time oracle of an ONNX model from onnxruntime's node profiler (DESIGN §3).

The model runs in an onnxruntime ``InferenceSession`` with per-node profiling
on and graph optimisations off (``ORT_DISABLE_ALL``), so every ONNX node stays
its own kernel and keeps its name; it has ``threads`` intra-op threads (1 by
default) and one inter-op thread. After ``warmup`` runs, ``runs`` runs are
timed; each node's ``<node>_kernel_time`` events (category ``Node``) are
assigned to the ``model_run`` that contains them, summed per run, and reduced
to the minimum (the oracle time) and the median over runs.

Rules for ops the profile does not show:

- A node every input of which is a compile-time constant (initializers,
  ``Constant`` outputs, or outputs of other such nodes) is evaluated by
  onnxruntime once at load time, not per run: it gets ``time = 0`` with
  ``source = "analytic"``. So does a ``Cast`` to the dtype its input already
  has, which onnxruntime removes at load.
- Any other forward op onnxruntime did not report is left out of the table and
  named in the returned ``missing`` dict with the reason.
- Training graphs (the importer's mirrored backward): ``f/grad`` costs
  2 × the time of ``f`` (gradients with respect to the input and the weights
  each cost about one forward), ``source = "analytic"``. A gradient
  accumulation ``<param>/grad_accum`` summing k gradients costs
  ``(k − 1) × params / ACCUM_ELEMENTS_PER_SECOND`` (a streaming element-wise
  add, bandwidth bound), also ``analytic``.

onnxruntime reports whole microseconds; a kernel faster than that reads 0 and
is recorded as ``RESOLUTION / 2`` (0.5 µs), the middle of the interval it lies in.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
from bisect import bisect_right
from pathlib import Path
from typing import Callable

from dlsched.dag import Graph
from dlsched.devices import check_device
from dlsched.errors import DlschedError

from .schema import check_threads, oracle_frame, oracle_row

ACCUM_ELEMENTS_PER_SECOND = 1e9
RESOLUTION = 1e-6
_KERNEL = "_kernel_time"


def _numpy_dtype(ort_type: str):
    import numpy as np

    table = {
        "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
        "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
        "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
    }
    if ort_type not in table:
        raise DlschedError(f"cannot feed a random input of type {ort_type}; supported: {', '.join(table)}")
    return table[ort_type]


def _token_bound(graph: Graph) -> int:
    """Exclusive upper bound for random integer inputs: the smallest embedding table, else 2."""
    bounds = []
    for op in graph.compute_ops():
        if op.op_type == "Gather" and op.phase == "forward":
            for p in graph.predecessors(op.name):
                r = graph.op(p)
                if r.kind == "recv" and r.shape:
                    bounds.append(int(r.shape[0]))
    return max(1, min(bounds)) if bounds else 2


def _random_inputs(session, graph: Graph, batch: int | None, seed: int = 0) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    high = _token_bound(graph)
    feeds = {}
    for inp in session.get_inputs():
        dims = []
        for i, d in enumerate(inp.shape):
            if isinstance(d, int) and d > 0 and not (i == 0 and batch is not None):
                dims.append(d)
            else:
                dims.append(batch if (i == 0 and batch is not None) else 1)
        dtype = _numpy_dtype(inp.type)
        if np.issubdtype(dtype, np.floating):
            feeds[inp.name] = rng.standard_normal(dims).astype(dtype)
        elif dtype == np.bool_:
            feeds[inp.name] = rng.integers(0, 2, dims).astype(np.bool_)
        else:
            feeds[inp.name] = rng.integers(0, high, dims).astype(dtype)
    return feeds


def _fed_batch(session, batch: int | None) -> tuple[int | None, bool]:
    """The batch :func:`_random_inputs` feeds, and whether it picked it for a symbolic dimension (no ``batch``)."""
    for inp in session.get_inputs():
        if inp.shape:
            if batch is not None:
                return batch, False
            d = inp.shape[0]
            return (d, False) if isinstance(d, int) and d > 0 else (1, True)
    return batch, False


def _constant_nodes(model, names: list[str]) -> set[str]:
    """Nodes whose inputs are all compile-time constants (onnxruntime folds them at load)."""
    const = {t.name for t in model.graph.initializer}
    out = set()
    for node, name in zip(model.graph.node, names):
        if all(not x or x in const for x in node.input) and not any(a.g.node or a.graphs for a in node.attribute):
            const.update(node.output)
            out.add(name)
    return out


def _noop_casts(model, names: list[str], graph: Graph) -> set[str]:
    """``Cast`` nodes to the dtype their input already has (onnxruntime drops them at load)."""
    from dlsched.importers.onnx_importer import DTYPES

    producer = {}
    for node, name in zip(model.graph.node, names):
        for k, out in enumerate(node.output):
            producer[out] = (name, k)
    out = set()
    for node, name in zip(model.graph.node, names):
        if node.op_type != "Cast" or not node.input or node.input[0] not in producer:
            continue
        src, k = producer[node.input[0]]
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        dtypes = graph.op(src).dtypes if src in graph else []
        if to in DTYPES and k < len(dtypes) and dtypes[k] == DTYPES[to][0]:
            out.add(name)
    return out


def _session_source(path: Path, model, names: list[str], batch: int | None):
    """The path itself, or the serialised model with node names / batch fixed where needed."""
    init = {t.name for t in model.graph.initializer}
    rename = any(n.name != name for n, name in zip(model.graph.node, names))
    fixed_batch = [i for i in model.graph.input if i.name not in init and i.type.tensor_type.shape.dim
                   and i.type.tensor_type.shape.dim[0].HasField("dim_value")
                   and batch is not None and i.type.tensor_type.shape.dim[0].dim_value != batch]
    if not rename and not fixed_batch:
        return str(path)
    import onnx

    model = onnx.load(str(path))
    for n, name in zip(model.graph.node, names):
        n.name = name
    if fixed_batch:
        for i in model.graph.input:
            dims = i.type.tensor_type.shape.dim
            if i.name not in init and dims:
                dims[0].Clear()
                dims[0].dim_param = "batch"
        del model.graph.value_info[:]
        for o in model.graph.output:
            o.type.tensor_type.ClearField("shape")
    return model.SerializeToString()


def profile_onnx(path, graph: Graph, device: str = "cpu", runs: int = 5, warmup: int = 1,
                 progress: Callable[[int, int], None] | None = None, threads: int = 1):
    """Time every compute op of ``graph`` (imported from ``path``) with onnxruntime.

    Parameters
    ----------
    path : str or Path
        The ``.onnx`` file ``graph`` was imported from.
    graph : Graph
        From :func:`dlsched.importers.onnx_importer.import_onnx`; its
        ``source["batch"]`` sizes the random inputs (1 for a symbolic batch
        when unset). Training graphs get analytic backward rows.
    device : {"cpu", "cuda"}
        ``cuda`` needs onnxruntime's CUDAExecutionProvider.
    runs, warmup : int
        Timed runs (min and median kept) and untimed runs before them.
    progress : callable, optional
        Called as ``progress(done, total)`` after each run (warm-up included).
    threads : int
        onnxruntime's intra-op threads (one inter-op thread: nodes run one
        after another).

    Returns
    -------
    (pandas.DataFrame, dict)
        One row per timed compute op, columns ``op, time, runs, median,
        op_type, resource, source`` (seconds), in canonical order; and
        op name → reason for the compute ops that could not be timed.
        ``df.attrs["batch"]`` is the batch fed, ``df.attrs["batch_picked"]``
        whether it was chosen for a symbolic batch dimension.

    Raises
    ------
    DlschedError
        Unknown device, CUDA unavailable, the model cannot be loaded or run.

    Examples
    --------
    >>> g = import_onnx("resnet50.onnx", batch=8)                       # doctest: +SKIP
    >>> df, missing = profile_onnx("resnet50.onnx", g, runs=5)          # doctest: +SKIP
    """
    import numpy as np
    import onnx
    import onnxruntime as ort

    from dlsched.importers.onnx_importer import node_names

    path = Path(path)
    if runs < 1 or warmup < 0:
        raise DlschedError(f"--runs must be at least 1 and warm-up at least 0 (got runs={runs}, warmup={warmup})")
    check_threads(threads)
    check_device(device, "onnxruntime")
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - any parse failure is a bad input file
        raise DlschedError(f"{path}: cannot read the ONNX model: {e}") from None
    names = node_names(list(model.graph.node))
    op_types = dict(zip(names, (n.op_type for n in model.graph.node)))
    folded = _constant_nodes(model, names)
    noops = _noop_casts(model, names, graph)
    batch = graph.source.get("batch")
    source = _session_source(path, model, names, batch)
    del model

    with tempfile.TemporaryDirectory(prefix="dlsched-ort-") as tmp:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        try:
            session = ort.InferenceSession(source, so, providers=providers)
            feeds = _random_inputs(session, graph, batch)
            ran_at = _fed_batch(session, batch)
            total = warmup + runs
            for i in range(total):
                session.run(None, feeds)
                if progress:
                    progress(i + 1, total)
            profile_file = session.end_profiling()
            events = json.loads(Path(profile_file).read_text())
        except DlschedError:
            raise
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise DlschedError(f"{path}: onnxruntime could not run the model: {e}") from None
        finally:
            session = None

    starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    per_run: dict[str, list[float]] = {}
    seen: dict[str, int] = {}
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        if e.get("cat") != "Node" or not e.get("name", "").endswith(_KERNEL):
            continue
        if starts:
            run = bisect_right(starts, e["ts"]) - 1 - warmup
        else:  # no model_run markers: the k-th execution of a node belongs to run k
            seen[e["name"]] = seen.get(e["name"], -1) + 1
            run = seen[e["name"]] - warmup
        if run < 0:
            continue
        times = per_run.setdefault(e["name"][:-len(_KERNEL)], [0.0] * runs)
        if run < runs:
            times[run] += e["dur"] * 1e-6
    rows, missing = [], {}
    measured: dict[str, tuple[float, float, int]] = {}
    for op in graph.compute_ops():
        if op.phase != "forward":
            continue
        if op.name in per_run:
            t = [max(x, RESOLUTION / 2) for x in per_run[op.name]]
            measured[op.name] = (min(t), statistics.median(t), runs)
            rows.append(oracle_row(op, min(t), runs=runs, median=statistics.median(t), source="profiled"))
        elif op.name in folded or op.name in noops:
            measured[op.name] = (0.0, 0.0, runs)
            rows.append(oracle_row(op, 0.0, runs=runs, source="analytic"))
        elif op.name not in op_types:
            missing[op.name] = f"no node named {op.name!r} in {path.name}; the graph was imported from another file"
        else:
            missing[op.name] = (f"onnxruntime reported no kernel for this {op.op_type} node "
                                f"(not executed, or fused by the execution provider)")
    for op in graph.compute_ops():
        if op.phase != "backward":
            continue
        fwd = op.attrs.get("forward")
        if op.op_type == "Sum" and fwd is None:
            recv = op.name.rsplit("/grad_accum", 1)[0]
            params = graph.op(recv).params if recv in graph else int(np.prod(op.output_shapes[0] or [1]))
            t = (int(op.attrs.get("inputs", 2)) - 1) * params / ACCUM_ELEMENTS_PER_SECOND
            rows.append(oracle_row(op, t, runs=runs, source="analytic"))
        elif fwd in measured:
            t, med, n = measured[fwd]
            rows.append(oracle_row(op, 2 * t, runs=n, median=2 * med, source="analytic"))
        else:
            missing[op.name] = f"its forward op {fwd!r} has no time: {missing.get(fwd, 'not profiled')}"
    df = oracle_frame(rows)
    df.attrs["batch"], df.attrs["batch_picked"] = ran_at
    return df, missing
