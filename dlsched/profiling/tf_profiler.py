"""Per-op time oracle for TensorFlow graphs from full-trace step stats (DESIGN §3).

The GraphDef (or the SavedModel's inlined serving graph) is prepared exactly as
the importer prepares it (same node names, same training ops), imported into a
``tf.Graph`` and run in a ``tf.compat.v1.Session`` with
``RunOptions(trace_level=FULL_TRACE)``. Each node's time in one run is its
``all_end_rel_nanos`` (from the kernel's start until its outputs are handed
on; ``all_end_rel_micros`` when nanos are absent). After ``warmup`` untraced
runs, ``runs`` traced runs give the minimum (``time``) and the median.

To keep step-stats names equal to DAG op names, Grappler runs only its
remapper (``rewrite_options.optimizers = ["remap"]``: no constant folding,
pruning, arithmetic or layout rewrites) and the classic graph optimiser runs at
``L0`` (no constant folding, no common-subexpression elimination); one
inter-op thread makes ops run one after another, as the oracle assumes
(each op on a dedicated resource), and ``threads`` intra-op threads (1 by
default) keep each op's time from depending on the machine's other load.

Fusion stays on: a user's real step runs Grappler's remapper and, on CPUs
where oneDNN is active, oneDNN's graph rewrite, so Conv2D + BiasAdd, MatMul +
BiasAdd + Relu … run as one kernel that carries one node's name. Profiling
without them would time kernels the real step never runs. The kernel's time
goes to the convolution or matmul and the other nodes of the chain get a row
with time 0, listed in ``df.attrs["fused"]`` as "fused into X"
(:mod:`dlsched.profiling.tf_fusion`, shared with the timeline import), so per-op
totals stay what ran. Variables are initialised with small random
values (timings do not depend on them); fed placeholders get random inputs
with the graph's batch (``graph.source["batch"]``, else 1 for a symbolic
batch dimension).

Merged reads (``ReadVariableOp``, ``…/read``) and variable nodes belong to
their recv and get no row. Compute ops without stats (and not fused into a
kernel) are returned with a reason (a fed placeholder runs no kernel; an op
the fetched outputs do not need never runs).

Examples
--------
>>> g = import_graphdef("resnet50.pb", batch=8)                  # doctest: +SKIP
>>> df, missing = profile_tf("resnet50.pb", g, runs=5)           # doctest: +SKIP
>>> df.columns.tolist()                                          # doctest: +SKIP
['op', 'time', 'runs', 'median', 'op_type', 'resource', 'source']
"""
from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Callable

from dlsched.dag import Graph
from dlsched.devices import check_device
from dlsched.errors import DlschedError, ImportFailure

from .schema import check_threads

MIN_TIME = 1e-9  # a traced kernel shorter than the clock's resolution still costs something


def _session_config(tf, device: str, threads: int = 1):
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=threads,
                                      allow_soft_placement=True)
    # Only the remapper: its fusions are what real steps run; every other rewrite would rename or drop nodes.
    config.graph_options.rewrite_options.optimizers.append("remap")
    config.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_function_inlining = False
    if device == "cpu":
        config.device_count["GPU"] = 0
    else:
        config.gpu_options.allow_growth = True
    return config


class TFSession:
    """A prepared graph in a session, ready to run (used by the profiler and its tests).

    Parameters
    ----------
    path : path
        The GraphDef file or SavedModel folder the DAG came from.
    graph : Graph
        The imported DAG (its ``mode``, ``source["format"]`` and ``source["batch"]`` are used).
    device : {"cpu", "cuda"}
    seed : int
    threads : int
        Intra-op threads of the session.

    Attributes
    ----------
    batch : int
        The batch fed: ``graph.source["batch"]``, else the inputs' fixed
        leading dimension, else 1 (``batch_picked``: the batch is symbolic).
    """

    def __init__(self, path, graph: Graph, device: str = "cpu", seed: int = 0, threads: int = 1):
        import numpy as np

        from dlsched.importers.tf_importer import _tf, prepare

        tf = _tf()
        check_threads(threads)
        check_device(device, "tensorflow")
        fmt = graph.source.get("format") or ("savedmodel" if Path(path).is_dir() else "graphdef")
        if fmt not in ("graphdef", "savedmodel"):
            raise ImportFailure(f"{path}: the TensorFlow profiler needs a GraphDef or SavedModel, not {fmt}")
        batch = graph.source.get("batch")
        self.prepared = prepare(path, fmt, graph.mode, batch)
        self.batch = batch or 1
        self.tf_graph = tf.Graph()
        rng = np.random.default_rng(seed)
        dev = "/device:GPU:0" if device == "cuda" else "/device:CPU:0"
        with self.tf_graph.as_default(), tf.device(dev):
            tf.graph_util.import_graph_def(self.prepared.graph_def, name="")
            inits = []
            with tf.name_scope("dlsched_init"):
                for v in self.prepared.variables:
                    if v.kind == "const":
                        continue
                    if v.shape is None or any(d is None for d in v.shape):
                        raise DlschedError(f"{path}: variable {v.name!r} has an unknown shape, so it cannot be "
                                           "initialised for profiling")
                    value = tf.random.normal(v.shape, stddev=0.01, dtype=tf.dtypes.as_dtype(v.dtype), seed=seed)
                    handle = self.tf_graph.get_tensor_by_name(v.node + ":0")
                    if v.kind == "ref":
                        inits.append(tf.compat.v1.assign(handle, value).op)
                    else:
                        inits.append(tf.raw_ops.AssignVariableOp(resource=handle, value=value))
            self.init = tf.group(*inits) if inits else None
        self.feeds = {}
        leading = []
        for name in self.prepared.inputs:
            t = self.tf_graph.get_operation_by_name(name).outputs[0]
            shape = [self.batch if d is None else d for d in (t.shape.as_list() if t.shape.rank is not None else [])]
            leading += [t.shape.as_list()[0]] if t.shape.rank else []
            dtype = t.dtype.as_numpy_dtype
            if t.dtype.is_floating:
                self.feeds[t] = rng.standard_normal(shape).astype(dtype)
            else:
                self.feeds[t] = np.zeros(shape, dtype=dtype)
        # Without --batch, a symbolic leading dimension was fed 1: say so (profile_tf's batch_picked).
        self.batch_picked = batch is None and bool(leading) and leading[0] is None
        if batch is None and leading and leading[0] is not None:
            self.batch = leading[0]
        fetch = [self.prepared.loss] + list(self.prepared.gradients.values()) if graph.mode == "training" \
            else self.prepared.outputs
        self.targets = [self.tf_graph.get_operation_by_name(n) for n in fetch]
        self.session = tf.compat.v1.Session(graph=self.tf_graph, config=_session_config(tf, device, threads))
        if self.init is not None:
            self.session.run(self.init)
        self._tf = tf

    def run(self, trace: bool = False):
        """Run one step; with ``trace`` return the ``RunMetadata`` (else ``None``)."""
        tf = self._tf
        if not trace:
            self.session.run(self.targets, feed_dict=self.feeds)
            return None
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        meta = tf.compat.v1.RunMetadata()
        self.session.run(self.targets, feed_dict=self.feeds, options=options, run_metadata=meta)
        return meta

    def close(self) -> None:
        self.session.close()


_LABEL_OP = re.compile(r"= ([\w>]+)\(")  # "[mklcpu 1MB 1MB] name = _MklNativeFusedConv2D(in, …)"


def _run_failure(sess: TFSession, e: Exception) -> DlschedError:
    """The error to report when a step fails: out of memory is named as such, with the batch to lower."""
    first = str(e).splitlines()[0] if str(e) else ""
    if isinstance(e, (sess._tf.errors.ResourceExhaustedError, MemoryError)):
        oom = next((line.strip() for line in str(e).splitlines() if "OOM" in line), first)
        return DlschedError(f"{sess.prepared.path}: TensorFlow ran out of memory running one step at batch "
                            f"{sess.batch} ({oom[:200]}); profile at a smaller --batch")
    return DlschedError(f"{sess.prepared.path}: TensorFlow failed to run the graph ({type(e).__name__}: {first})")


def node_times(meta, kernel_ops: dict | None = None) -> dict[str, float]:
    """Seconds per node name from one run's step stats (kernel start to outputs handed on).

    With ``kernel_ops``, also record each entry's kernel op type (from its
    ``timeline_label``) under its node name, for :func:`~dlsched.profiling.tf_fusion.split_fused`.
    """
    times: dict[str, float] = {}
    for dev in meta.step_stats.dev_stats:
        if "/stream:" in dev.device or "/memcpy" in dev.device:
            continue  # GPU stream entries duplicate the op names with kernel-only times
        for ns in dev.node_stats:
            name = ns.node_name.split(":")[0]
            if ns.all_end_rel_nanos:
                t = ns.all_end_rel_nanos * 1e-9
            else:
                t = ns.all_end_rel_micros * 1e-6
            times[name] = times.get(name, 0.0) + t
            if kernel_ops is not None:
                m = _LABEL_OP.search(ns.timeline_label)
                if m:
                    kernel_ops.setdefault(name, m.group(1))
    return times


def profile_tf(path, graph: Graph, device: str = "cpu", runs: int = 5, warmup: int = 1,
               progress: Callable[[int, int], None] | None = None, plain_runs: int = 0, threads: int = 1):
    """Profile every compute op of a TF graph; minimum and median over ``runs`` traced runs.

    Parameters
    ----------
    path : path
        The ``.pb``/``.pbtxt`` or SavedModel folder that ``graph`` was imported from.
    graph : Graph
        The DAG from :func:`~dlsched.importers.tf_importer.import_graphdef` or
        :func:`~dlsched.importers.tf_importer.import_saved_model` (mode and batch are taken from it).
    device : {"cpu", "cuda"}
    runs, warmup : int
    progress : callable, optional
        ``progress(done, total)`` after each run, warm-up included (``total = warmup + runs``).
    plain_runs : int
        Also time this many untraced runs of the same session, interleaved
        with the traced ones so both see the same machine load; their wall
        times go to ``df.attrs["plain_wall"]`` (the traced runs' to
        ``df.attrs["traced_wall"]``), for sanity and overhead checks.
    threads : int
        Intra-op threads of the session (one inter-op thread).

    Returns
    -------
    (pandas.DataFrame, dict)
        Rows ``op, time, runs, median, op_type, resource, source`` (seconds,
        ``source="profiled"``), one per compute op that produced stats or was
        fused into a kernel that did (time 0), in canonical order; and compute
        op name → why it has no row. ``df.attrs["fused"]`` maps each fused op to
        "fused into X: …" (X holds the kernel's time); ``df.attrs["batch"]``
        is the batch fed, ``df.attrs["batch_picked"]`` whether it was chosen
        for a symbolic batch dimension.

    Raises
    ------
    DlschedError
        ``device="cuda"`` without a GPU visible to TensorFlow, or a graph that cannot run.
    """
    if runs < 1:
        raise DlschedError(f"--runs must be at least 1, got {runs}")
    sess = TFSession(path, graph, device, threads=threads)
    try:
        return profile_session(sess, graph, runs, warmup, progress, plain_runs)
    finally:
        sess.close()


def profile_session(sess: TFSession, graph: Graph, runs: int = 5, warmup: int = 1,
                    progress: Callable[[int, int], None] | None = None, plain_runs: int = 0):
    """The measuring loop of :func:`profile_tf` on an open :class:`TFSession`."""
    import time

    import pandas as pd

    from .tf_fusion import split_fused

    total = warmup + runs
    samples: dict[str, list] = {}
    kernel_ops: dict[str, str] = {}
    plain, traced = [], []
    for i in range(total):
        try:
            if i >= warmup and i - warmup < plain_runs:
                t0 = time.perf_counter()
                sess.run(trace=False)
                plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            meta = sess.run(trace=i >= warmup)
            if meta is not None:
                traced.append(time.perf_counter() - t0)
        except Exception as e:
            raise _run_failure(sess, e) from None
        if meta is not None:
            for name, t in node_times(meta, kernel_ops).items():
                samples.setdefault(name, []).append(t)
        if progress:
            progress(i + 1, total)
    for _ in range(max(0, plain_runs - runs)):
        t0 = time.perf_counter()
        sess.run(trace=False)
        plain.append(time.perf_counter() - t0)
    fed = set(sess.prepared.inputs)
    samples, fused = split_fused(graph, samples, kernel_ops, exclude=fed)
    rows, missing = [], {}
    for op in graph.compute_ops():
        ts = samples.get(op.name)
        if op.name in fused:  # its work was timed on the op named in the reason
            rows.append({"op": op.name, "time": 0.0, "runs": len(ts), "median": 0.0, "op_type": op.op_type,
                         "resource": op.resource, "source": "profiled"})
            continue
        if not ts:
            if op.name in fed:
                missing[op.name] = "fed input placeholder: its value is fed, no kernel runs"
            else:
                missing[op.name] = "no step stats: TensorFlow did not run it for the fetched outputs"
            continue
        rows.append({"op": op.name, "time": max(min(ts), MIN_TIME), "runs": len(ts),
                     "median": max(statistics.median(ts), MIN_TIME), "op_type": op.op_type,
                     "resource": op.resource, "source": "profiled"})
    cols = ["op", "time", "runs", "median", "op_type", "resource", "source"]
    df = pd.DataFrame(rows, columns=cols)
    df.attrs["fused"] = {name: f.reason for name, f in fused.items()}
    df.attrs["plain_wall"] = plain
    df.attrs["traced_wall"] = traced
    df.attrs["batch"], df.attrs["batch_picked"] = sess.batch, sess.batch_picked
    return df, missing
