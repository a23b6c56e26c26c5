"""Build compute-op times from an existing trace instead of running the model (DESIGN §3).

Two matchers, tried in this order:

1. **By name** — TF timelines (``tensorflow.python.client.timeline``: each
   event's ``args.name`` is the GraphDef node name; a fed placeholder ``x``
   appears as ``_arg_x_0_0``), TF profiler traces (``args.long_name``
   ``node:Type``) and any Chrome trace whose event names are DAG op names.
   Ops that TensorFlow ran as one fused kernel (Grappler's remapper: MatMul +
   BiasAdd + Relu become one ``_FusedMatMul`` event named after the Relu;
   oneDNN: ``_MklNativeFusedMatMul``, ``_MklNativeConv2DWithBias`` …) are split
   by :mod:`dlsched.profiling.tf_fusion`, the rule the TF profiler uses too:
   the kernel's time goes to the convolution or matmul, the other ops of the
   chain get time 0 and are listed under ``fused`` in the coverage (op → the
   op holding the time). Used when it matches at least half of the compute ops.
2. **By type and order** — PyTorch profiler (Kineto) Chrome traces, whose
   events are named after aten ops (``aten::conv2d``) and, with
   ``with_modules=True``/``with_stack=True``, module calls
   (``nn.Module: Conv2d_0``):

   * every op type is normalised (``aten::max_pool2d`` → ``maxpool2d``,
     ``aten.convolution.default`` → ``convolution``, ``Conv2d`` → ``conv2d``,
     in-place ``add_`` → ``add``), so a ``Conv2d`` module op also matches an
     ``aten::conv2d`` event when the trace has no module events;
   * per thread, events are nested by time; walking the nesting top-down, the
     outermost event whose type is one of the DAG's types is a *unit* and its
     children are not looked at (``nn.Module: Conv2d_0`` hides its
     ``aten::conv2d``; in training traces ``aten::linear`` is not a DAG type,
     so its ``aten::t`` and ``aten::addmm`` are units);
   * units are split into iterations at ``ProfilerStep#N`` events, else at the
     outermost module calls (one per forward), else the trace is one iteration;
   * each iteration's units are aligned with the DAG's compute ops in
     topological order (a longest-common-subsequence alignment on the types,
     preferring the earliest events); a part that still holds several
     iterations is aligned window by window, each starting after the last
     event the previous alignment used;
   * an op's ``time`` is the minimum over iterations, with median and count.

The file is read by :func:`read_trace_events`, dlsched's one reader of
Chrome-trace / TF-timeline JSON (``bounds --trace`` measures a makespan with
it too), so both commands accept and refuse the same files.

Coverage is reported: matched ops, unmatched DAG ops (with the reason) and
trace units that matched nothing. Times are Chrome-trace microseconds → s.
"""
from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.dag import Graph


from dlsched.formats.kineto_trace import TraceError  # noqa: F401  (re-exported: raised by this module)


@dataclass
class TraceImport:
    """Result of :func:`import_trace`.

    ``frame`` has one row per matched compute op (``source = "trace"``);
    ``untimed`` maps unmatched compute ops to the reason; ``coverage`` holds
    ``matched``, ``compute_ops``, ``fraction``, ``iterations``, ``matcher``,
    ``unknown_events`` ({event name: count}) and ``unmatched_ops``.
    """

    frame: pd.DataFrame
    untimed: dict = field(default_factory=dict)
    coverage: dict = field(default_factory=dict)


_ALIASES = {"batchnorm1d": "batchnorm", "batchnorm2d": "batchnorm", "batchnorm3d": "batchnorm",
            "nativebatchnorm": "nativebatchnorm", "iadd": "add", "imul": "mul", "truediv": "div",
            "isub": "sub", "itruediv": "div", "floordiv": "floordivide"}
# Ops that are Python-level bookkeeping in an fx graph and leave no event in a trace.
_NO_EVENT = {"getitem", "size", "dim", "detach", "alias", "lift_fresh_copy"}


def normalize_type(name: str) -> str:
    """Canonical op type for matching across fx, aten and trace spellings.

    Examples
    --------
    >>> [normalize_type(n) for n in ("aten::max_pool2d", "aten.convolution.default", "MaxPool2d", "add_")]
    ['maxpool2d', 'convolution', 'maxpool2d', 'add']
    """
    s = str(name)
    if s.startswith("nn.Module: "):
        s = s[len("nn.Module: "):]
        s = re.sub(r"_\d+$", "", s)
    s = re.sub(r"^(aten|prim|torch\.ops\.aten)(::|\.)", "", s)
    if "." in s:  # aten overload spelling op.overload
        s = s.split(".")[0]
    s = s.rstrip("_").lower().replace("_", "")
    return _ALIASES.get(s, s)


def read_trace_events(path: str | Path) -> list[dict]:
    """Read the complete (``ph: "X"``) events of a Chrome-trace or TF-timeline JSON file.

    The one reader of these files: :func:`load_trace` (op times) and
    :func:`dlsched.analyses.bounds.trace_makespan` (a measured makespan) both
    use it. It lives here rather than in :mod:`dlsched.formats`, whose
    modules write dlsched's own files and depend on the library, not the
    other way round; these traces come from other tools (PyTorch profiler,
    TF timelines, Perfetto) and are read by the library itself.

    The document is a bare event list or an object with ``traceEvents``;
    gzip is recognised by its magic bytes, whatever the suffix. An event
    counts when ``ph`` is ``"X"`` and ``ts`` and ``dur`` (default 0) are
    finite numbers; the returned events are the trace's own dicts with
    ``ts``/``dur`` as floats (microseconds). Other events are skipped.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    list of dict

    Raises
    ------
    TraceError
        The file is missing or unreadable, is not JSON, is not a Chrome trace,
        holds no complete events, or holds one with a negative duration
        (named with its ``ts``): every message starts with the file name.

    Examples
    --------
    >>> import json, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.json")
    >>> _ = open(p, "w").write(json.dumps([{"ph": "M", "name": "process_name"},
    ...                                    {"ph": "X", "name": "conv", "ts": 10, "dur": 5}]))
    >>> [(e["name"], e["ts"], e["dur"]) for e in read_trace_events(p)]
    [('conv', 10.0, 5.0)]
    """
    from dlsched.formats.kineto_trace import complete_events

    return complete_events(path)


def load_trace(path: str | Path) -> list[dict]:
    """The complete events of a trace (:func:`read_trace_events`) that carry a ``name`` to match ops by.

    Raises
    ------
    TraceError
        As :func:`read_trace_events`, or no complete event has a name.
    """
    out = [e for e in read_trace_events(path) if e.get("name")]
    if not out:
        raise TraceError(f"{path}: the trace holds no named complete ('ph': 'X') events")
    return out


_TF_ARG = re.compile(r"^_arg_(.+?)_\d+_\d+$")


def _name_keys(e: dict) -> list[str]:
    args = e.get("args") or {}
    keys = []
    for k in ("name", "long_name", "op_name", "tf_op"):
        v = args.get(k)
        if isinstance(v, str):
            keys += [v, v.split(":")[0]]
    keys += [e["name"], e["name"].split(":")[0]]
    # TF feeds a Placeholder through an _Arg node named _arg_<placeholder>_0_0.
    keys += [m.group(1) for k in keys for m in [_TF_ARG.match(k)] if m]
    return keys


def _rows(graph: Graph, samples: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for op in graph.compute_ops():
        xs = samples.get(op.name)
        if xs:
            rows.append({"op": op.name, "time": min(xs), "runs": len(xs), "median": statistics.median(xs),
                         "op_type": op.op_type, "resource": op.resource, "source": "trace"})
    return pd.DataFrame(rows, columns=["op", "time", "runs", "median", "op_type", "resource", "source"])


def match_by_name(events: list[dict], graph: Graph) -> tuple[dict, Counter, dict]:
    """Match events naming compute ops.

    Returns
    -------
    (dict, Counter, dict)
        ``{op: [seconds, …]}``, the other event names counted, and
        ``{op: Fusion}`` for ops TensorFlow ran inside another op's fused kernel
        (:func:`~dlsched.profiling.tf_fusion.split_fused`): they get zeros, the
        op doing the work gets the kernel's time.
    """
    from .tf_fusion import split_fused

    compute = {op.name for op in graph.compute_ops()}
    samples: dict[str, list[float]] = {}
    kernel_ops: dict[str, str] = {}
    unknown: Counter = Counter()
    for e in events:
        hit = next((k for k in _name_keys(e) if k in compute), None)
        if hit is None:
            if (e.get("args") or {}).get("name") is not None or e.get("cat") in ("Op", "cpu_op"):
                unknown[e["name"]] += 1
            continue
        samples.setdefault(hit, []).append(e["dur"] * 1e-6)
        kernel_op = (e.get("args") or {}).get("op")
        if isinstance(kernel_op, str):  # TF timelines say which kernel ran; other traces do not
            kernel_ops.setdefault(hit, kernel_op)
    samples, fused = split_fused(graph, samples, kernel_ops)
    return samples, unknown, fused


def _nest(events: list[dict]) -> list[tuple[dict, list]]:
    """Per-thread forest of events as ``(event, children)`` (nesting by time intervals)."""
    roots: list = []
    by_thread: dict = {}
    for e in events:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list = []
        for e in evs:
            node = (e, [])
            end = e["ts"] + e["dur"]
            while stack and end > stack[-1][0]["ts"] + stack[-1][0]["dur"] + 1e-3:
                stack.pop()
            (stack[-1][1] if stack else roots).append(node)
            stack.append(node)
    roots.sort(key=lambda n: n[0]["ts"])
    return roots


def _units(forest, types: set) -> tuple[list[dict], list[dict], list[dict]]:
    """Outermost events whose type is a DAG type; iteration boundaries; stray aten ops."""
    units, steps, modules, stray = [], [], [], []

    def is_module(e):
        return e["name"].startswith("nn.Module: ")

    def walk(node, in_module, in_cpu_op) -> bool:
        """Collect units below ``node``; True when it holds one."""
        e, kids = node
        name = e["name"]
        step = name.startswith("ProfilerStep#")
        if step:
            steps.append(e)
        elif is_module(e) and not in_module:
            modules.append(e)
        cat = e.get("cat", "")
        typed = cat in ("cpu_op", "python_function", "Operator", "") and (is_module(e) or cat != "python_function")
        if typed and not step and normalize_type(name) in types:
            units.append(e)
            return True
        inner = cat == "cpu_op" and not step
        found = False
        for k in kids:
            found |= walk(k, in_module or is_module(e), in_cpu_op or inner)
        # A top-level aten op with no DAG op inside it is work the DAG does not know about.
        if inner and not in_cpu_op and not found:
            stray.append(e)
        return found

    for root in forest:
        walk(root, False, False)
    units.sort(key=lambda e: e["ts"])
    bounds = steps or (modules if len(modules) > 1 else [])
    return units, sorted(bounds, key=lambda e: e["ts"]), stray


def _lcs_pairs(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of ``a`` and ``b`` (numpy rows)."""
    n, m = len(a), len(b)
    if not n or not m:
        return []
    codes: dict = {}
    ai = np.array([codes.setdefault(x, len(codes)) for x in a])
    bi = np.array([codes.setdefault(x, len(codes)) for x in b])
    table = np.zeros((n + 1, m + 1), dtype=np.int32)
    for i in range(1, n + 1):
        diag = table[i - 1, :-1] + (bi == ai[i - 1])
        row = np.maximum(table[i - 1, 1:], diag)
        # L[i][j] = max(row[j], L[i][j-1]) unrolls to a running maximum.
        table[i, 1:] = np.maximum.accumulate(row)
    pairs = []
    i, j = n, m
    while i and j:
        if ai[i - 1] == bi[j - 1] and table[i, j] == table[i - 1, j - 1] + 1:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif table[i - 1, j] >= table[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def match_by_alignment(events: list[dict], graph: Graph) -> tuple[dict, Counter, int]:
    """Align PyTorch trace events with the DAG's compute ops by type and order (module docstring).

    Returns
    -------
    (dict, Counter, int)
        ``{op: [seconds per iteration]}``, names of units matched by no op (and
        top-level aten ops of no DAG type) with counts, and the iteration count.
    """
    ops = [op for op in graph.topological_order() if op.kind == "compute"]
    op_types = [normalize_type(op.op_type or op.name) for op in ops]
    types = set(op_types) - {""}
    units, bounds, stray = _units(_nest(events), types)
    starts = [b["ts"] for b in bounds]
    segments: list[list[dict]] = [[] for _ in range(max(len(starts), 1))]
    for u in units:
        k = 0
        for i, s in enumerate(starts):  # few iterations; a linear scan is fine
            if u["ts"] >= s - 1e-3:
                k = i
        segments[k].append(u)
    samples: dict[str, list[float]] = {}
    unknown: Counter = Counter()
    used_iterations = 0
    n = len(ops)
    for seg in segments:
        seg_types = [normalize_type(u["name"]) for u in seg]
        matched_units: set = set()
        start = first = 0
        # A segment may still hold several iterations (no step or module markers): align the
        # DAG against a window at a time, preferring the earliest events, and move past it.
        while start < len(seg):
            window = seg_types[start:start + 2 * n + 8]
            pairs = _lcs_pairs(op_types[::-1], window[::-1])
            pairs = [(n - 1 - i, len(window) - 1 - j) for i, j in pairs][::-1]
            if not pairs or (first and len(pairs) < first / 2):
                break
            first = first or len(pairs)
            used_iterations += 1
            for i, j in pairs:
                samples.setdefault(ops[i].name, []).append(seg[start + j]["dur"] * 1e-6)
                matched_units.add(start + j)
            start += pairs[-1][1] + 1
        for j, u in enumerate(seg):
            if j not in matched_units:
                unknown[u["name"]] += 1
    for e in stray:
        if normalize_type(e["name"]) not in types:
            unknown[e["name"]] += 1
    return samples, unknown, used_iterations


def import_trace(path: str | Path, graph: Graph) -> TraceImport:
    """Time ``graph``'s compute ops from a PyTorch profiler or TF trace file.

    Parameters
    ----------
    path : str or Path
        A Chrome-trace JSON (optionally gzipped).
    graph : Graph
        The model the trace was recorded from.

    Returns
    -------
    TraceImport

    Raises
    ------
    TraceError
        The file is not a readable trace.

    Examples
    --------
    >>> r = import_trace("trace.json", graph)            # doctest: +SKIP
    >>> r.coverage["fraction"] >= 0.9                    # doctest: +SKIP
    True
    """
    events = load_trace(path)
    compute = graph.compute_ops()
    samples, unknown, fused = match_by_name(events, graph)
    matcher, iterations = "name", max((len(v) for v in samples.values()), default=0)
    if len(samples) < len(compute) / 2:
        a_samples, a_unknown, a_iter = match_by_alignment(events, graph)
        if len(a_samples) > len(samples):
            samples, unknown, matcher, iterations = a_samples, a_unknown, "type-alignment", a_iter
            fused = {}
    frame = _rows(graph, samples)
    frame.attrs["fused"] = {name: f.reason for name, f in fused.items()}
    untimed = {}
    for op in compute:
        if op.name not in samples:
            t = normalize_type(op.op_type)
            why = (f"no {op.op_type!r} event in the trace matched it"
                   if t not in _NO_EVENT else f"{op.op_type!r} is Python bookkeeping that leaves no trace event")
            untimed[op.name] = f"{why} (trace {Path(path).name}, {matcher} matcher)"
    n = len(compute)
    coverage = {
        "matcher": matcher,
        "matched": len(frame),
        "compute_ops": n,
        "fraction": (len(frame) / n) if n else 1.0,
        "iterations": iterations,
        "unmatched_ops": [op.name for op in compute if op.name not in samples],
        "fused": {name: f.work for name, f in fused.items()},
        "unknown_events": dict(unknown.most_common(50)),
        "unknown_event_count": int(sum(unknown.values())),
    }
    return TraceImport(frame=frame, untimed=untimed, coverage=coverage)
