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

   * every op type is mapped to its family through one alias table
     (:mod:`dlsched.profiling.trace_aliases`: ``aten::cudnn_batch_norm``,
     ``aten::batch_norm`` and ``native_batch_norm`` are one family; ``Conv2d``,
     ``aten::miopen_convolution`` and ``aten.convolution.default`` another);
   * per thread, events are nested by time; walking the nesting top-down, the
     outermost event whose family is one of the DAG's is a *unit* and its
     children are not looked at (a module event only when the DAG holds that
     very module type); units inside an autograd backward node that are forward
     ops are *recomputes* (activation checkpointing);
   * units are split into iterations at ``ProfilerStep#N`` events, else at the
     outermost module calls (one per forward), else the trace is one iteration;
   * each iteration's units are aligned with the DAG's compute ops in
     topological order (a longest-common-subsequence alignment on the families,
     where the recorded shapes agree, preferring the earliest events); a part
     that still holds several iterations is aligned window by window; each
     backward node's recomputes are aligned with the forward ops on their own,
     and their time is added to that op in that iteration (``recompute``);
   * an op's ``time`` is its GPU time when the trace has kernels (the device
     events it launched, :mod:`dlsched.profiling.kernel_times`), else its host
     time; ``host_time`` keeps the host time; both the minimum over iterations.

Coverage is reported by op count and by **time**: the matched share of the
trace's compute-kernel time (host op time in a CPU trace), per step and in all;
below ``min_coverage`` the trace is refused with the unmatched op types and
their share of that time.

The file is read by :func:`~dlsched.formats.kineto_trace.read_kineto`,
dlsched's one reader of Chrome-trace / TF-timeline JSON (``bounds --trace``
measures a makespan with it too, through :func:`read_trace_events`), so both
commands accept and refuse the same files.

Unmatched DAG ops are named with the reason (``shapes differ: trace [...] vs DAG
[...]`` among them), and trace units that matched nothing are counted. Times are
Chrome-trace microseconds → s.
"""
from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.dag import Graph
from dlsched.formats.kineto_trace import KEPT_ARGS, TraceError, read_kineto

from .kernel_times import charge, containing, device_launches, outermost, thread_key
from .kineto_events import COMPUTE
from .trace_aliases import normalize_type, op_family

__all__ = ["TraceError", "TraceImport", "import_trace", "load_trace", "match_by_alignment", "match_by_name",
           "normalize_type", "op_family", "read_trace_events"]


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


# Ops that are Python-level bookkeeping in an fx graph and leave no event in a trace: timed 0 (no work).
_NO_EVENT = {"getitem", "size", "dim", "detach", "alias", "lift_fresh_copy"}


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


def match_by_name(events: list[dict], graph: Graph, durations: Counter | None = None) -> tuple[dict, Counter, dict]:
    """Match events naming compute ops (``durations``, when given, gets the microseconds of the others by name).

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
                if durations is not None:
                    durations[e["name"]] += e["dur"]
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


# Autograd's backward nodes: the engine's wrapper and the node itself (ConvolutionBackward0 …).
_BACKWARD = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$")


def _dims(node) -> list | None:
    """The unit's recorded ``Input Dims``, else those of its first descendant that has them."""
    e, kids = node
    d = (e.get("args") or {}).get("Input Dims")
    if isinstance(d, list):
        return d
    for k in kids:
        d = _dims(k)
        if d is not None:
            return d
    return None


def _units(forest, types: set, families: set, backward_families: set) -> tuple[list[dict], list[dict], list[dict]]:
    """Outermost events whose type is a DAG type; iteration boundaries; stray aten ops.

    A unit is marked ``recompute`` when it runs inside an autograd backward node although it is a
    forward op (its family is no backward op's, or a module call wraps it there): activation
    checkpointing re-running the forward of a segment during the backward.
    """
    units, steps, modules, stray = [], [], [], []

    def is_module(e):
        return e["name"].startswith("nn.Module: ")

    def walk(node, in_module, in_cpu_op, in_backward, module_in_backward, region) -> bool:
        """Collect units below ``node``; True when it holds one."""
        e, kids = node
        name = e["name"]
        # The GPU's twin of a step annotation (gpu_user_annotation) is not a step of the host.
        step = name.startswith("ProfilerStep#") and not e.get("cat", "").startswith("gpu_")
        if step:
            steps.append(e)
        elif is_module(e) and not in_module:
            modules.append(e)
        cat = e.get("cat", "")
        module = is_module(e)
        typed = cat in ("cpu_op", "python_function", "Operator", "") and (module or cat != "python_function")
        if typed and not step:
            # A module is a unit only as the very type the DAG holds; aten spellings match by family.
            hit = normalize_type(name) in types if module else op_family(name) in families
            if hit:
                fam = op_family(name)
                e["_family"] = fam
                e["_dims"] = _dims(node)
                e["_recompute"] = in_backward and (module_in_backward or fam not in backward_families)
                e["_region"] = region
                units.append(e)
                return True
        inner = cat == "cpu_op" and not step
        backward = in_backward or (cat == "cpu_op" and bool(_BACKWARD.search(name)))
        if backward and not in_backward:
            region = id(e)  # the backward node whose recomputation this is: one checkpointed segment
        found = False
        for k in kids:
            found |= walk(k, in_module or module, in_cpu_op or inner, backward,
                          module_in_backward or (backward and module), region)
        # A top-level aten op with no DAG op inside it is work the DAG does not know about.
        if inner and not in_cpu_op and not found:
            stray.append(e)
        return found

    for root in forest:
        walk(root, False, False, False, False, None)
    units.sort(key=lambda e: e["ts"])
    bounds = steps or (modules if len(modules) > 1 else [])
    return units, sorted(bounds, key=lambda e: e["ts"]), stray


def _shape_key(dims) -> tuple | None:
    """The tensors of an input list as a sorted tuple of their sorted dimensions (``None``: unknown).

    Sorting each tensor's dimensions makes a transposed weight (``addmm``'s ``[512, 1000]`` and
    ``linear``'s ``[1000, 512]``) the same; scalars and non-tensor arguments (``[]``) are left out.
    """
    if not isinstance(dims, list):
        return None
    out = []
    for d in dims:
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):  # a tensor list
            out += [tuple(sorted(x)) for x in d if x and all(isinstance(v, int) for v in x)]
        elif isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            out.append(tuple(sorted(d)))
    return tuple(sorted(out))


def _flattened(dag: tuple, trace: tuple) -> bool:
    """Whether the 2-D DAG tensor ``dag`` is the trace's N-D ``trace`` with its other dims merged into one.

    A ``Linear`` on a ``[32, 64, 256]`` input is ``aten::linear`` on that tensor in a trace, but ``addmm``
    on its ``[2048, 256]`` view in an aten-level graph. Both keys are sorted (:func:`_shape_key`), so any
    one dim of ``trace`` may be the kept one.

    >>> _flattened((256, 2048), (32, 64, 256)), _flattened((256, 2048), (32, 32, 256))
    (True, False)
    """
    return len(dag) == 2 < len(trace) and math.prod(trace) == math.prod(dag) and any(d in trace for d in dag)


def _fits(dag: tuple, trace: tuple) -> bool:
    """Every tensor of the DAG op's inputs is among the trace op's (a module's DAG op lists only its input),
    the same or :func:`_flattened`."""
    need, have = Counter(dag), Counter(trace)
    short = []
    for k, v in need.items():
        got = min(have[k], v)
        have[k] -= got
        short += [k] * (v - got)
    for k in short:  # what the exact shapes left over: matched by a flattened trace tensor, if one is left
        match = next((t for t, c in have.items() if c > 0 and _flattened(k, t)), None)
        if match is None:
            return False
        have[match] -= 1
    return True


def _lcs_pairs(a: list, b: list, fits=None) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of ``a`` and ``b`` (numpy rows).

    ``fits(i)``, when given, is a boolean row over ``b``: which of ``b``'s items may pair with ``a[i]``
    beyond being equal (the shapes agree).
    """
    n, m = len(a), len(b)
    if not n or not m:
        return []
    codes: dict = {}
    ai = np.array([codes.setdefault(x, len(codes)) for x in a])
    bi = np.array([codes.setdefault(x, len(codes)) for x in b])

    def eq(i):
        row = bi == ai[i]
        return row & fits(i) if fits is not None else row

    table = np.zeros((n + 1, m + 1), dtype=np.int32)
    rows = []
    for i in range(1, n + 1):
        e = eq(i - 1)
        rows.append(e)
        diag = table[i - 1, :-1] + e
        row = np.maximum(table[i - 1, 1:], diag)
        # L[i][j] = max(row[j], L[i][j-1]) unrolls to a running maximum.
        table[i, 1:] = np.maximum.accumulate(row)
    pairs = []
    i, j = n, m
    while i and j:
        if rows[i - 1][j - 1] and table[i, j] == table[i - 1, j - 1] + 1:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif table[i - 1, j] >= table[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


class _Shapes:
    """Shape agreement between DAG ops and trace units, by codes of their shape keys (few distinct ones)."""

    def __init__(self, ops, on: bool):
        self.on = on
        self.codes: dict = {}
        self.ops = np.array([self.code(_shape_key(list(op.input_shapes or []))) if on else -1 for op in ops])
        self.cache: dict = {}

    def code(self, key) -> int:
        if key is None or not self.on:
            return -1
        return self.codes.setdefault(key, len(self.codes))

    def fits(self, op_codes: np.ndarray, unit_codes: np.ndarray):
        """``fits(i)`` for :func:`_lcs_pairs`: op ``i`` against every unit."""
        if not self.on:
            return None
        keys = {v: k for k, v in self.codes.items()}

        def ok(a: int, b: int) -> bool:
            if a < 0 or b < 0:
                return True
            if (a, b) not in self.cache:
                self.cache[(a, b)] = _fits(keys[a], keys[b])
            return self.cache[(a, b)]

        uniq = np.unique(unit_codes)

        def row(i):
            a = op_codes[i]
            table = {b: ok(a, b) for b in uniq}
            return np.array([table[b] for b in unit_codes], dtype=bool)
        return row


@dataclass
class _Sample:
    """One iteration of one op: host and GPU seconds, and what recomputation added."""

    host: float
    gpu: float
    recompute_host: float = 0.0
    recompute_gpu: float = 0.0


def _align(ops, op_fams, op_codes, seg, shapes: _Shapes, samples: dict, recompute: bool) -> tuple[int, set]:
    """Align ``seg``'s units with ``ops`` window after window; returns iterations aligned and units used."""
    n = len(ops)
    seg_fams = [u["_family"] for u in seg]
    unit_codes = np.array([u["_shape"] for u in seg], dtype=np.int64)
    used: set = set()
    start = first = iterations = 0
    # A segment may still hold several iterations (no step or module markers): align the DAG against a
    # window at a time, preferring the earliest events (both reversed), and move past it.
    while start < len(seg):
        stop = min(len(seg), start + 2 * n + 8)
        window = seg_fams[start:stop][::-1]
        rev_codes = unit_codes[start:stop][::-1]
        fits = shapes.fits(op_codes[::-1], rev_codes)
        pairs = _lcs_pairs(op_fams[::-1], window, fits)
        pairs = [(n - 1 - i, len(window) - 1 - j) for i, j in pairs][::-1]
        if not pairs or (first and len(pairs) < first / 2):
            break
        first = first or len(pairs)
        iterations += 1
        for i, j in pairs:
            u = seg[start + j]
            name = ops[i].name
            if recompute:
                if samples.get(name):  # extra time of the iteration that op last ran in
                    s = samples[name][-1]
                    s.recompute_host += u["dur"] * 1e-6
                    s.recompute_gpu += u["_gpu"] * 1e-6
                    used.add(start + j)
            else:
                samples.setdefault(name, []).append(_Sample(u["dur"] * 1e-6, u["_gpu"] * 1e-6))
                used.add(start + j)
        start += pairs[-1][1] + 1
    return iterations, used


def match_by_alignment(events: list[dict], graph: Graph, dev: pd.DataFrame | None = None,
                       shapes: bool = True) -> tuple[dict, Counter, int, dict]:
    """Align PyTorch trace events with the DAG's compute ops by family, shape and order (module docstring).

    ``events`` are the trace's named events as dicts. With ``dev``, the trace's device events joined to
    their launches (:func:`~dlsched.profiling.kernel_times.device_launches`), each unit's GPU time is the
    device time it launched (:func:`~dlsched.profiling.kernel_times.charge`); without, it is 0. With
    ``shapes`` and a trace that recorded them, a unit pairs with an op only when the shapes agree.

    Returns
    -------
    (dict, Counter, int, dict)
        ``{op: [_Sample per iteration]}``, names of units matched by no op (and top-level aten ops of
        no DAG type) with counts, the iteration count, and ``detail``: ``units`` (all units, each
        with ``_matched``), ``segments`` (their start times), ``owner`` (per row of ``dev``: the unit
        that launched it, or -1) and ``shape_refusals`` ({op: reason}).
    """
    ops = [op for op in graph.topological_order() if op.kind == "compute"]
    op_fams = [op_family(op.op_type or op.name) for op in ops]
    types = {normalize_type(op.op_type or op.name) for op in ops} - {""}
    families = set(op_fams) - {""}
    backward_families = {f for op, f in zip(ops, op_fams) if op.phase == "backward"}
    units, bounds, stray = _units(_nest(events), types, families, backward_families)
    on = shapes and any(u["_dims"] is not None for u in units)
    sh = _Shapes(ops, on)
    owner = np.full(0 if dev is None else len(dev), -1, dtype=np.int64)
    if dev is not None and units:
        charged = charge(dev, pd.Series([f"{u['pid']}/{u['tid']}" for u in units], dtype=object),
                         np.array([u["ts"] for u in units], dtype=float),
                         np.array([u["ts"] + u["dur"] for u in units], dtype=float))
        owner = charged["owner"]
        for u, g in zip(units, charged["gpu"]):
            u["_gpu"] = float(g)
    for u in units:
        u["_shape"] = sh.code(_shape_key(u["_dims"]))
        u.setdefault("_gpu", 0.0)
        u["_matched"] = False
    op_codes = sh.ops
    fwd = [k for k, op in enumerate(ops) if op.phase != "backward"]
    starts = [b["ts"] for b in bounds]
    segments: list[list[dict]] = [[] for _ in range(max(len(starts), 1))]
    for u in units:
        k = 0
        for i, s in enumerate(starts):  # few iterations; a linear scan is fine
            if u["ts"] >= s - 1e-3:
                k = i
        segments[k].append(u)
    samples: dict[str, list[_Sample]] = {}
    unknown: Counter = Counter()
    used_iterations = 0
    for seg in segments:
        main = [u for u in seg if not u["_recompute"]]
        again = [u for u in seg if u["_recompute"]]
        its, used = _align(ops, op_fams, op_codes, main, sh, samples, recompute=False)
        used_iterations += its
        for j in used:
            main[j]["_matched"] = True
        # Each backward node re-runs one checkpointed segment (the last segment first): align each alone.
        regions: dict = {}
        for u in again:
            regions.setdefault(u["_region"], []).append(u)
        for part in regions.values():
            _, used = _align([ops[k] for k in fwd], [op_fams[k] for k in fwd], op_codes[fwd], part, sh, samples,
                             recompute=True)
            for j in used:
                part[j]["_matched"] = True
    for u in units:
        if not u["_matched"]:
            unknown[u["name"]] += 1
    for e in stray:
        if op_family(e["name"]) not in families:
            unknown[e["name"]] += 1
    refusals = _shape_refusals(ops, op_fams, samples, units, sh) if on else {}
    return samples, unknown, used_iterations, {"units": units, "segments": starts, "owner": owner,
                                               "shape_refusals": refusals}


def _fmt_dims(dims) -> str:
    """The tensors of an input list as written (``[[10, 3, 224, 224], [64, 3, 7, 7]]``), scalars left out."""
    tensors = [d for d in dims or [] if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]
    return "[" + ", ".join("[" + ", ".join(map(str, d)) + "]" for d in tensors) + "]"


def _tensors(dims) -> list[tuple]:
    return [tuple(d) for d in dims or [] if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]


def _likeness(dag: list[tuple], trace: list[tuple]) -> int:
    """How alike two input lists are: tensors equal (2), or equal but for the batch dimension (1)."""
    rest = [t[1:] for t in trace]
    return sum(2 if t in trace else (1 if t[1:] in rest else 0) for t in dag)


def _shape_refusals(ops, op_fams, samples, units, sh: _Shapes) -> dict:
    """For each unmatched op with a trace unit of its family left unmatched: why (the shapes differ).

    The unit named is the most alike of its family's leftovers, so a trace at another batch says so.
    """
    keys = {v: k for k, v in sh.codes.items()}
    spare: dict = {}
    for u in units:
        if not u["_matched"] and u["_shape"] >= 0:
            spare.setdefault(u["_family"], {}).setdefault(u["_shape"], u)
    out = {}
    for op, fam, code in zip(ops, op_fams, sh.ops):
        if op.name in samples or code < 0 or fam not in spare or normalize_type(op.op_type) in _NO_EVENT:
            continue
        dag = _tensors(list(op.input_shapes))
        u = max(spare[fam].values(), key=lambda u: _likeness(dag, _tensors(u["_dims"])))
        if _fits(keys[code], keys[u["_shape"]]):
            continue
        out[op.name] = (f"shapes differ: trace {_fmt_dims(u['_dims'])} vs DAG {_fmt_dims(list(op.input_shapes))} "
                        f"({u['name']})")
    return out


#: Arguments the import reads: shapes (Kineto) and the names TF timelines give their nodes.
IMPORT_ARGS = KEPT_ARGS | {"name", "long_name", "op_name", "tf_op", "op"}


def _event_dicts(events: pd.DataFrame) -> list[dict]:
    cols = ["name", "cat", "pid", "tid", "ts", "dur", "args"]
    named = events[events["name"] != ""]
    return [dict(zip(cols, row)) for row in named[cols].itertuples(index=False, name=None)]


def _rows(graph: Graph, samples: dict[str, list[_Sample]], gpu: bool, free: set, runs: int) -> pd.DataFrame:
    """One oracle row per timed op, in canonical order; the ``free`` ops (no event, no work) timed 0."""
    rows = []
    for op in graph.compute_ops():
        xs = samples.get(op.name)
        if op.name in free:
            rows.append({"op": op.name, "time": 0.0, "runs": runs, "median": 0.0, "op_type": op.op_type,
                         "resource": op.resource, "source": "trace", "host_time": 0.0, "recompute": 0.0})
        elif xs:
            total = [(s.gpu + s.recompute_gpu) if gpu else (s.host + s.recompute_host) for s in xs]
            best = int(np.argmin(total))
            rows.append({"op": op.name, "time": total[best], "runs": len(xs), "median": statistics.median(total),
                         "op_type": op.op_type, "resource": op.resource, "source": "trace",
                         "host_time": min(s.host + s.recompute_host for s in xs),
                         "recompute": xs[best].recompute_gpu if gpu else xs[best].recompute_host})
    return pd.DataFrame(rows, columns=["op", "time", "runs", "median", "op_type", "resource", "source", "host_time",
                                       "recompute"])


def _segment_of(ts: np.ndarray, starts: list[float]) -> np.ndarray:
    """Segment index of each time (the last start at or before it; 0 before the first)."""
    if not starts:
        return np.zeros(len(ts), dtype=np.int64)
    return np.maximum(np.searchsorted(np.asarray(starts) - 1e-3, ts, side="right") - 1, 0)


def _label(frame: pd.DataFrame, thread, ts: np.ndarray) -> np.ndarray:
    """Name of the outermost host op (``cpu_op``, else annotation) holding each point; '' where none."""
    out = np.full(len(ts), "", dtype=object)
    for cats in (("cpu_op",), ("user_annotation",)):
        host = frame[frame["cat"].isin(cats) & ~frame["name"].str.startswith("ProfilerStep#")
                     & ~frame["name"].str.match(_BACKWARD)]
        host = host[outermost(host)]
        left = out == ""
        if not left.any() or host.empty:
            continue
        k = containing(pd.Series(np.asarray(thread, dtype=object)[left]), ts[left], thread_key(host),
                       host["ts"].to_numpy(float), host["end"].to_numpy(float))
        names = host["name"].to_numpy()
        out[np.flatnonzero(left)[k >= 0]] = names[k[k >= 0]]
    return out


def _gpu_coverage(dev: pd.DataFrame, events: pd.DataFrame, units: list, owner: np.ndarray, starts: list) -> dict:
    """Matched share of the compute-kernel time launched in the trace, per step and in all."""
    comp = (dev["kind"] == COMPUTE).to_numpy() & dev["thread"].notna().to_numpy()
    dur = dev["dur"].to_numpy(float)
    matched_unit = np.array([u["_matched"] for u in units] + [False], dtype=bool)
    hit = comp & matched_unit[np.where(owner >= 0, owner, len(units))]
    seg = _segment_of(dev["launch_ts"].to_numpy(float), starts)
    nseg = max(len(starts), 1)
    total_by = np.bincount(seg[comp], weights=dur[comp], minlength=nseg)
    hit_by = np.bincount(seg[hit], weights=dur[hit], minlength=nseg)
    miss = comp & ~hit
    labels = np.full(len(dev), "", dtype=object)
    in_unit = miss & (owner >= 0)
    labels[in_unit] = [units[k]["name"] for k in owner[in_unit]]
    rest = miss & (owner < 0)
    labels[rest] = _label(events, dev.loc[rest, "thread"], dev.loc[rest, "launch_ts"].to_numpy(float))
    unmatched = pd.Series(dur[miss]).groupby(np.where(labels[miss] == "", "(no host op)", labels[miss])).sum()
    before = (dev["kind"] == COMPUTE).to_numpy() & dev["thread"].isna().to_numpy()
    return {"basis": "GPU compute-kernel time", "matched_us": float(hit_by.sum()), "total_us": float(total_by.sum()),
            "per_step": [float(h / t) if t else None for h, t in zip(hit_by, total_by)],
            "unmatched_us": unmatched.sort_values(ascending=False).to_dict(),
            "launched_before_trace_us": float(dur[before].sum())}


def _host_coverage(events: pd.DataFrame, units: list, starts: list) -> dict:
    """Matched share of the host op time (outermost ``cpu_op`` events), per step and in all."""
    host = events[(events["cat"] == "cpu_op") & ~events["name"].str.startswith("ProfilerStep#")]
    outer = host[outermost(host)]
    o_thread, o_ts, o_end = thread_key(outer), outer["ts"].to_numpy(float), outer["end"].to_numpy(float)
    o_dur = outer["dur"].to_numpy(float)
    matched = [u for u in units if u["_matched"]]
    u_thread = pd.Series([f"{u['pid']}/{u['tid']}" for u in matched], dtype=object)
    u_ts = np.array([u["ts"] for u in matched], dtype=float)
    u_end = np.array([u["ts"] + u["dur"] for u in matched], dtype=float)
    is_op = np.array([u.get("cat") == "cpu_op" for u in matched], dtype=bool)
    credit = np.zeros(len(outer))
    # A module unit holds whole outermost ops; an op unit lies inside one (or is one).
    k = containing(o_thread, o_ts, u_thread, u_ts, u_end)
    for i in np.flatnonzero(k >= 0):
        if not is_op[k[i]]:
            credit[i] = o_dur[i]
    if is_op.any():
        inside = containing(u_thread[is_op].reset_index(drop=True), u_ts[is_op], o_thread, o_ts, o_end)
        np.add.at(credit, inside[inside >= 0], (u_end - u_ts)[is_op][inside >= 0])
    credit = np.minimum(credit, o_dur)
    seg = _segment_of(o_ts, starts)
    nseg = max(len(starts), 1)
    total_by = np.bincount(seg, weights=o_dur, minlength=nseg)
    hit_by = np.bincount(seg, weights=credit, minlength=nseg)
    unmatched = pd.Series(o_dur - credit).groupby(outer["name"].to_numpy()).sum()
    unmatched = unmatched[unmatched > 0]
    return {"basis": "host op time", "matched_us": float(hit_by.sum()), "total_us": float(total_by.sum()),
            "per_step": [float(h / t) if t else None for h, t in zip(hit_by, total_by)],
            "unmatched_us": unmatched.sort_values(ascending=False).to_dict(), "launched_before_trace_us": 0.0}


def _refuse(path, graph: Graph, cov: dict, refusals: dict, min_coverage: float, purpose: str = "") -> None:
    """Raise the paragraph that says why the trace cannot time this model (``purpose``: what it was for)."""
    frac, total = cov["time_fraction"], cov["total_us"]
    steps = len(cov["per_step"])
    parts = [f"{Path(path).name}: {frac:.0%} coverage: ops of {graph.name} ({graph.mode}) match "
             f"{cov['matched_us'] / 1e3:.3g} ms of the trace's {total / 1e3:.3g} ms of {cov['basis']} "
             f"({steps} step(s)), below {min_coverage:.0%}, so "
             + (purpose or "no oracle was written") + "."]
    if total <= 0:
        parts.append(f"The trace holds no {cov['basis']} to match (is it a trace of a training job at all?).")
    top = list(cov["unmatched_us"].items())[:6]
    if top and total > 0:
        parts.append("Unmatched, by share of that time: " + ", ".join(f"{n} {t / total:.0%}" for n, t in top) + ".")
    if refusals:
        name, why = next(iter(refusals.items()))
        parts.append(f"{len(refusals)} op(s) whose type the trace has were refused because their shapes differ "
                     f"(e.g. {name}: {why}).")
        batch = _batch_hint(refusals)
        if batch:
            parts.append(f"Most differ in the first dimension only: the trace ran at batch {batch}; load the model "
                         f"at it (--batch {batch}).")
    parts.append("Give the trace of this model, at its batch (--batch) and mode (--mode)" + (
        "" if purpose else "; lower --min-coverage only when the unmatched work is truly not the model's (a data "
        "loader, an optimizer)") + ".")
    raise TraceError(" ".join(parts))


_FIRST = re.compile(r"trace \[\[(\d+)((?:, \d+)*)\]")
_FIRST_DAG = re.compile(r"DAG \[\[(\d+)((?:, \d+)*)\]")


def _batch_hint(refusals: dict) -> int | None:
    """The trace's batch when most refused ops differ from their trace op in the first dimension only."""
    batches = Counter()
    for why in refusals.values():
        t, d = _FIRST.search(why), _FIRST_DAG.search(why)
        if t and d and t.group(2) == d.group(2) and t.group(1) != d.group(1):
            batches[int(t.group(1))] += 1
    if not batches:
        return None
    batch, n = batches.most_common(1)[0]
    return batch if n >= len(refusals) / 2 else None


#: The share of a trace's compute time that must match the model's ops (``profile --min-coverage``'s default).
MIN_COVERAGE = 0.8
_OP_CATS = ("cpu_op", "kernel", "Op", "Operator")


def check_trace_of_model(path: str | Path, graph: Graph, min_coverage: float = MIN_COVERAGE) -> None:
    """Refuse a framework trace that is not of ``graph``: one whose op events cover too little of it.

    ``bounds --trace`` and ``plan-cluster --trace`` take only a trace's span, but
    a span means something only for this model's iteration. A trace of framework
    ops (PyTorch's ``cpu_op`` and kernels, TF's ops) is matched as ``profile
    --from-trace`` matches it and refused below ``min_coverage``; a trace of bare
    spans (no op events) says nothing about its model and is left to the span checks.

    Raises
    ------
    TraceError
        Below ``min_coverage`` (the paragraph of :func:`import_trace`).
    """
    events = read_kineto(path, keep_args=frozenset()).events
    if not events["cat"].isin(_OP_CATS).any() and not events["name"].str.startswith("aten::").any():
        return
    import_trace(path, graph, min_coverage=min_coverage,
                 purpose="its span is not an iteration of this model and is not rated")


def import_trace(path: str | Path, graph: Graph, min_coverage: float | None = None,
                 purpose: str = "") -> TraceImport:
    """Time ``graph``'s compute ops from a PyTorch profiler or TF trace file.

    Parameters
    ----------
    path : str or Path
        A Chrome-trace JSON (optionally gzipped).
    graph : Graph
        The model the trace was recorded from.
    min_coverage : float, optional
        Refuse the trace when the matched share of its compute time is below this (0 to 1).

    Returns
    -------
    TraceImport

    Raises
    ------
    TraceError
        The file is not a readable trace, or its coverage is below ``min_coverage``.

    Examples
    --------
    >>> r = import_trace("trace.json", graph)            # doctest: +SKIP
    >>> r.coverage["time_fraction"] >= 0.9               # doctest: +SKIP
    True
    """
    trace = read_kineto(path, keep_args=IMPORT_ARGS)
    events = _event_dicts(trace.events)
    if not events:
        raise TraceError(f"{path}: the trace holds no named complete ('ph': 'X') events")
    compute = graph.compute_ops()
    durations: Counter = Counter()
    samples_by_name, unknown, fused = match_by_name(events, graph, durations)
    samples = {k: [_Sample(x, 0.0) for x in v] for k, v in samples_by_name.items()}
    matcher, iterations = "name", max((len(v) for v in samples.values()), default=0)
    refusals: dict = {}
    gpu = False
    cov: dict = {"basis": "op time", "matched_us": sum(sum(v) for v in samples_by_name.values()) * 1e6,
                 "unmatched_us": dict(durations.most_common(20)), "per_step": [], "launched_before_trace_us": 0.0}
    cov["total_us"] = cov["matched_us"] + sum(durations.values())
    if len(samples) < len(compute) / 2:
        dev = device_launches(trace.events)
        gpu = bool(((dev["kind"] == COMPUTE) & dev["thread"].notna()).any())
        a_samples, a_unknown, a_iter, detail = match_by_alignment(events, graph, dev=dev if gpu else None)
        if len(a_samples) > len(samples) or not samples:
            samples, unknown, matcher, iterations = a_samples, a_unknown, "type-alignment", a_iter
            fused, refusals = {}, detail["shape_refusals"]
            cov = (_gpu_coverage(dev, trace.events, detail["units"], detail["owner"], detail["segments"]) if gpu
                   else _host_coverage(trace.events, detail["units"], detail["segments"]))
            cov["recompute_us"] = sum(s.recompute_gpu if gpu else s.recompute_host
                                      for v in samples.values() for s in v) * 1e6
            cov["recomputed_ops"] = sum(any(s.recompute_host > 0 for s in v) for v in samples.values())
        else:
            gpu = False
    cov["time_fraction"] = cov["matched_us"] / cov["total_us"] if cov["total_us"] > 0 else 0.0
    if min_coverage is not None and cov["time_fraction"] < min_coverage:
        _refuse(path, graph, cov, refusals, min_coverage, purpose)
    untimed, free = {}, set()
    for op in compute:
        if op.name not in samples:
            if normalize_type(op.op_type) in _NO_EVENT and op.name not in refusals:
                free.add(op.name)  # Python bookkeeping (tuple indexing, detach): no event, no work; timed 0
                continue
            why = refusals.get(op.name) or f"no {op.op_type!r} event in the trace matched it"
            untimed[op.name] = f"{why} (trace {Path(path).name}, {matcher} matcher)"
    frame = _rows(graph, samples, gpu, free, iterations)
    frame.attrs["fused"] = {name: f.reason for name, f in fused.items()}
    matched = len(frame) - len(free)
    n = len(compute)
    coverage = {
        "matcher": matcher,
        "times": "gpu kernels" if gpu else "host",
        "matched": matched,
        "compute_ops": n,
        "fraction": (matched / n) if n else 1.0,
        "time_fraction": cov["time_fraction"],
        "time_basis": cov["basis"],
        "matched_time": cov["matched_us"] * 1e-6,
        "compute_time": cov["total_us"] * 1e-6,
        "per_step_time_fraction": cov["per_step"],
        "unmatched_time": {k: v * 1e-6 for k, v in list(cov["unmatched_us"].items())[:20]},
        "kernels_launched_before_trace": cov["launched_before_trace_us"] * 1e-6,
        "recompute_time": cov.get("recompute_us", 0.0) * 1e-6,
        "recomputed_ops": cov.get("recomputed_ops", 0),
        "iterations": iterations,
        "unmatched_ops": [op.name for op in compute if op.name not in samples],
        "no_event_ops": len(free),
        "shape_refusals": len(refusals),
        "fused": {name: f.work for name, f in fused.items()},
        "unknown_events": dict(unknown.most_common(50)),
        "unknown_event_count": int(sum(unknown.values())),
    }
    return TraceImport(frame=frame, untimed=untimed, coverage=coverage)
