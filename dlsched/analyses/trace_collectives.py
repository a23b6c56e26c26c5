"""Every collective of one rank's Kineto trace, once, per step in launch order; DDP's buckets from them.

A collective leaves several events in a trace, and which ones depends on the
PyTorch version and the backend: the ``c10d::allreduce_`` op, the
``record_param_comms`` record function (with ``Collective name``, ``In msg
nelems``, ``dtype``, ``Group size`` and the process group in newer versions,
nothing but shapes in older ones), the backend's record function
(``nccl:all_reduce``, ``gloo:all_reduce``, with the input's dims and type),
and on GPUs the NCCL/RCCL kernel (``ncclKernel_*``, ``ncclDevKernel_*``; RCCL
copies the collective's description into the kernel's args). Counting each of
them would count one collective three or four times, so they are linked first:

- on the host thread that issued it, the outermost communication event and
  everything nested inside it are one collective (the *root* and its members);
- the kernels are those whose runtime launch (``cudaLaunchKernel``,
  ``hipExtLaunchKernel``) is nested inside the root, joined through the launch's
  ``correlation`` id;
- gloo runs the collective on a worker thread of its own, so ``gloo:*`` does
  not nest under the ``c10d::`` op that queued it: it is linked to the earliest
  unlinked collective of the same name and size queued before it (gloo's work
  queue is first in, first out). gloo runs a reduce-scatter as an all-reduce of
  the whole input (``gloo:all_reduce`` under ``c10d::_reduce_scatter_base_``,
  FSDP2 on CPU): such an all-reduce left unlinked is linked to the reduce-scatter
  of that input's size.

Collectives issued together under one coalescing manager nest in one record
and count as one, as NCCL runs them as one. What is left unnamed is not a collective: ``record_param_comms`` named
``wait`` (a ``Work.wait()``), and in older traces its bare records with
neither a name, a backend record nor a kernel (their count is kept in the
frame's ``attrs["not_collectives"]``). NCCL kernels whose launch precedes the trace
(the GPU runs behind the host) are collectives of an earlier step: they are
kept with step −1 and whatever their name and args say.

Times: ``launch_ts`` is when the host issued the collective (the root's
start). ``start``/``end`` are the span of its kernels on a GPU trace (NaN for a
collective that launched none, such as an empty all-to-all), and on a CPU
trace the span of the backend's record function (gloo's worker running it,
peers' waits included), else the root's host span.

A DDP bucket is one all-reduce issued from backward: inside an autograd
``evaluate_function`` on the issuing thread (DDP's reducer fires when a
bucket's last gradient is accumulated). That leaves out DDP's broadcasts (the
model's state at construction, buffers before each forward) and anything
all-reduced in forward.
"""
from __future__ import annotations

import ast
import math
import re
from collections import deque

import numpy as np
import pandas as pd

from dlsched.formats.kineto_trace import KinetoTrace
from dlsched.profiling.kineto_events import (
    HOST_COLLECTIVE,
    COMMUNICATION, HOST_CATS, device_events, runtime_events, steps,
)

COLUMNS = ["step", "seq", "name", "elements", "out_elements", "dtype", "bytes", "group", "group_desc",
           "group_size", "group_ranks", "launch_ts", "host_end", "start", "end", "stream", "kernels", "pid", "tid",
           "source"]

# Host record functions of collectives: the one rule of profiling/kineto_events.py.
_HOST_COMM = HOST_COLLECTIVE
_BACKEND = re.compile(r"^(nccl|gloo|mpi|ucc|xccl|rccl|hccl):")
# c10d ops whose first argument is the output and the second the input.
_OUT_FIRST = re.compile(r"^c10d::(_allgather_base_|_reduce_scatter_base_|alltoall_base_|allgather_into_tensor|"
                        r"reduce_scatter_tensor)")
_SUFFIX = re.compile(r"_(base|coalesced|into_tensor|tensor|single|v)$")
_NAMES = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
          "alltoall": "all_to_all", "alltoallv": "all_to_all", "broadcast": "broadcast", "barrier": "barrier",
          "monitoredbarrier": "barrier", "send": "send", "recv": "recv", "recvanysource": "recv",
          "gather": "gather", "scatter": "scatter", "reduce": "reduce", "wait": "wait", "sendrecv": "sendrecv"}
_KERNEL_NAME = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)

#: PyTorch ScalarType names (what ``record_param_comms`` writes) from the spellings traces use, with sizes.
DTYPES = {
    "float": "Float", "float32": "Float", "double": "Double", "float64": "Double", "half": "Half",
    "float16": "Half", "c10::half": "Half", "bfloat16": "BFloat16", "c10::bfloat16": "BFloat16",
    "long": "Long", "long int": "Long", "int64": "Long", "int64_t": "Long", "long long": "Long",
    "int": "Int", "int32": "Int", "int32_t": "Int", "short": "Short", "int16": "Short", "short int": "Short",
    "signed char": "Char", "char": "Char", "int8": "Char", "int8_t": "Char", "unsigned char": "Byte",
    "byte": "Byte", "uint8": "Byte", "uint8_t": "Byte", "bool": "Bool",
    "c10::complex<float>": "ComplexFloat", "complexfloat": "ComplexFloat",
    "c10::complex<double>": "ComplexDouble", "complexdouble": "ComplexDouble",
    "c10::float8_e4m3fn": "Float8_e4m3fn", "float8_e4m3fn": "Float8_e4m3fn",
    "c10::float8_e5m2": "Float8_e5m2", "float8_e5m2": "Float8_e5m2",
}
ITEMSIZE = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
            "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1}


def collective_name(name: str) -> str:
    """The collective an event name stands for, one spelling per collective.

    Examples
    --------
    >>> [collective_name(n) for n in ("c10d::allreduce_", "nccl:all_reduce", "c10d::_allgather_base_",
    ...  "nccl:_reduce_scatter_base", "c10d::alltoall_base_", "gloo:broadcast", "allgather_into_tensor_coalesced")]
    ['allreduce', 'allreduce', 'allgather', 'reduce_scatter', 'all_to_all', 'broadcast', 'allgather']
    """
    s = name.split(":")[-1].strip("_").lower()
    while True:
        t = _SUFFIX.sub("", s)
        if t == s:
            break
        s = t
    key = s.replace("_", "")
    return _NAMES.get(key, s)


def dtype_name(t) -> str:
    """A trace's spelling of an element type as PyTorch's ScalarType name ('' when unknown).

    Examples
    --------
    >>> dtype_name("c10::BFloat16"), dtype_name("float"), dtype_name("long int"), dtype_name("TensorList")
    ('BFloat16', 'Float', 'Long', '')
    """
    if not isinstance(t, str) or not t:
        return ""
    if t in ITEMSIZE:
        return t
    return DTYPES.get(t.strip().lower(), "")


def _nelems(dims) -> int:
    """Elements of one argument's ``Input Dims``: a shape, or a list of shapes (a TensorList); -1 if none."""
    if not isinstance(dims, list) or not dims:
        return -1
    if all(isinstance(d, (int, float)) for d in dims):
        return int(math.prod(int(d) for d in dims))
    if all(isinstance(d, list) for d in dims):
        parts = [_nelems(d) if d else 0 for d in dims]
        return sum(p for p in parts if p > 0) if any(p >= 0 for p in parts) else -1
    return -1


def _arg_dims(args: dict | None, i: int) -> int:
    dims = (args or {}).get("Input Dims")
    return _nelems(dims[i]) if isinstance(dims, list) and len(dims) > i else -1


def _first_type(args: dict | None) -> str:
    for t in (args or {}).get("Input type") or []:
        d = dtype_name(t)
        if d:
            return d
    return ""


def _int_arg(args: dict | None, key: str) -> int:
    v = (args or {}).get(key)
    if isinstance(v, bool) or v is None:
        return -1
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def _ranks(v) -> list[int] | None:
    """``Process Group Ranks`` as a list ('[0, 1, 2]' in traces); None when absent or empty."""
    if isinstance(v, str):
        try:
            v = ast.literal_eval(v.strip())
        except (ValueError, SyntaxError):
            return None
    if isinstance(v, (list, tuple)) and v and all(isinstance(r, int) for r in v):
        return [int(r) for r in v]
    return None


def _kernel_collective(name: str) -> str:
    """The collective an NCCL/RCCL kernel's name says (``Generic`` kernels say nothing: 'unknown')."""
    m = _KERNEL_NAME.search(name)
    if not m or m.group(1).lower() == "generic":
        return "unknown"
    return collective_name(m.group(1))


class _Coll:
    """One collective being assembled from its events."""

    __slots__ = ("pid", "tid", "ts", "end", "members", "backend", "kernels")

    def __init__(self, pid, tid, ts, end):
        self.pid, self.tid, self.ts, self.end = pid, tid, ts, end
        self.members: list[tuple[str, dict | None]] = []
        self.backend: list[tuple[str, float, float, dict | None]] = []  # linked from another thread (gloo)
        self.kernels: list[tuple[float, float, int, str, dict | None]] = []


def _roots(host: pd.DataFrame) -> list[_Coll]:
    """Group nested communication events by thread: the outermost one and what it encloses."""
    out: list[_Coll] = []
    h = host.assign(_neg=-host["dur"]).sort_values(["pid", "tid", "ts", "_neg"], kind="stable")
    cur = None
    for pid, tid, ts, end, name, args in zip(h["pid"], h["tid"], h["ts"], h["end"], h["name"], h["args"]):
        if cur is None or cur.pid != pid or cur.tid != tid or ts >= cur.end:
            cur = _Coll(pid, tid, ts, end)
            out.append(cur)
        cur.members.append((name, args))
    return out


def _describe(c: _Coll, trace: KinetoTrace) -> dict | None:
    """A row for one collective, or None when it is not one (a wait, an unnamed record)."""
    rpc = [a for n, a in c.members if n == "record_param_comms"]
    c10d = [(n, a) for n, a in c.members if n.startswith("c10d::")]
    backend = [(n, a) for n, a in c.members if _BACKEND.match(n)] + [(n, a) for n, _, _, a in c.backend]
    kargs = next((a for *_, a in c.kernels if a and a.get("Collective name")), None)
    names = [(a or {}).get("Collective name") for a in rpc] + [(kargs or {}).get("Collective name")]
    name = next((collective_name(n) for n in names if isinstance(n, str) and n), "")
    if not name and c10d:  # what the program called: gloo may run it as another collective
        name = collective_name(c10d[0][0])
    if not name and backend:
        name = collective_name(backend[0][0])
    if not name and c.kernels:
        name = _kernel_collective(c.kernels[0][3])
    if not name or name == "wait":
        return None
    desc = next((a for a in rpc if a and a.get("Collective name")), None) or kargs or {}
    elements = _int_arg(desc, "In msg nelems")
    out_elements = _int_arg(desc, "Out msg nelems")
    if elements < 0 and backend:
        elements = _arg_dims(backend[0][1], 0)
    if elements < 0 and rpc:
        elements = _arg_dims(rpc[0], 0)
    if c10d:
        n, a = c10d[0]
        first, second = _arg_dims(a, 0), _arg_dims(a, 1)
        if _OUT_FIRST.match(n):
            elements = elements if elements >= 0 else second
            out_elements = out_elements if out_elements >= 0 else first
        elif elements < 0:
            elements = first
    if out_elements < 0 and name in ("allreduce", "broadcast", "reduce", "barrier"):
        out_elements = elements
    dtype = dtype_name(desc.get("dtype"))
    for _, a in backend + c10d:
        dtype = dtype or _first_type(a)
    group = desc.get("Process Group Name")
    group = str(group) if group is not None else ""
    group_desc = str(desc.get("Process Group Description") or "")
    ranks = _ranks(desc.get("Process Group Ranks"))
    pgs = trace.distributed.get("pg_config")
    pgs = [p for p in pgs if isinstance(p, dict)] if isinstance(pgs, list) else []
    # the header's groups: the one named, or (a gloo record names none) the only one there is
    match = [p for p in pgs if str(p.get("pg_name")) == group] if group else pgs if len(pgs) == 1 else []
    if len(match) == 1:
        group = group or str(match[0].get("pg_name", ""))
        group_desc = group_desc or str(match[0].get("pg_desc") or "")
        ranks = ranks if ranks is not None else _ranks(match[0].get("ranks"))
    group_size = _int_arg(desc, "Group size")
    if group_size < 0 and ranks is not None:
        group_size = len(ranks)
    if group_size < 0 and elements > 0 and out_elements > 0:
        # the one place older traces state the group: the ratio of output to input
        big, small = max(elements, out_elements), min(elements, out_elements)
        if name in ("allgather", "reduce_scatter") and big % small == 0:
            group_size = big // small
    source = [n for n, _ in c.members] + [n for n, *_ in c.backend] + (["kernel"] if c.kernels else [])
    if c.kernels:
        start = min(k[0] for k in c.kernels)
        end = max(k[1] for k in c.kernels)
        stream = c.kernels[0][2]
    elif c.backend:
        start, end, stream = c.backend[0][1], c.backend[0][2], -1
    else:
        start, end, stream = c.ts, c.end, -1
    size = ITEMSIZE.get(dtype)
    return {"name": name, "elements": elements, "out_elements": out_elements, "dtype": dtype,
            "bytes": elements * size if size and elements >= 0 else -1, "group": group, "group_desc": group_desc,
            "group_size": group_size, "group_ranks": ranks, "launch_ts": c.ts, "host_end": c.end,
            "start": start, "end": end, "stream": stream, "kernels": len(c.kernels), "pid": c.pid,
            "tid": c.tid, "source": "+".join(dict.fromkeys(source))}


def collectives(trace: KinetoTrace) -> pd.DataFrame:
    """Every collective of ``trace``, once, in launch order (module docstring).

    Parameters
    ----------
    trace : KinetoTrace

    Returns
    -------
    pandas.DataFrame
        One row per collective, sorted by step then launch: ``step`` (the ``ProfilerStep`` whose
        host span holds the launch, −1 outside steps or launched before the trace), ``seq`` (launch
        order within the step), ``name`` (:func:`collective_name`), ``elements`` (the input's
        element count) and ``out_elements`` (−1 when unknown), ``dtype`` (ScalarType name, '' when
        unknown), ``bytes`` (input, −1 when unknown), ``group`` (process group name), ``group_desc``,
        ``group_size`` (−1 when the trace does not say), ``group_ranks`` (list or None),
        ``launch_ts`` and ``host_end`` (the issuing host span), ``start``, ``end`` (see the module
        docstring), ``stream`` (−1 on CPU), ``kernels`` (how many), ``pid``, ``tid`` (the issuing
        thread) and ``source`` (the events it was read from, joined by ``+``). Times in µs.
        ``attrs["not_collectives"]`` counts the bare ``record_param_comms`` left out.

    Examples
    --------
    >>> import json, os, tempfile
    >>> from dlsched.formats.kineto_trace import read_kineto
    >>> ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
    ...       {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 10, "dur": 5, "pid": 1, "tid": 1,
    ...        "args": {"Input Dims": [[[1000]], []], "Input type": ["TensorList", ""]}},
    ...       {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 12, "dur": 30, "pid": 1,
    ...        "tid": 2, "args": {"Input Dims": [[1000]], "Input type": ["float"]}}]
    >>> p = os.path.join(tempfile.mkdtemp(), "t.json")
    >>> _ = open(p, "w").write(json.dumps({"traceEvents": ev}))
    >>> c = collectives(read_kineto(p))
    >>> c[["step", "name", "elements", "dtype", "bytes", "start", "end", "source"]].values.tolist()
    [[3, 'allreduce', 1000, 'Float', 4000, 12.0, 42.0, 'c10d::allreduce_+gloo:all_reduce']]
    """
    ev = trace.events
    host = ev[ev["cat"].isin(HOST_CATS) & ev["name"].str.match(_HOST_COMM)]
    roots = _roots(host)
    # gloo's worker threads: a backend record standing alone is the execution of a collective queued elsewhere
    queued = [c for c in roots if any(not _BACKEND.match(n) for n, _ in c.members)]
    alone = [c for c in roots if all(_BACKEND.match(n) for n, _ in c.members)]
    waiting: dict[tuple[str, int], deque] = {}
    for q in sorted(queued, key=lambda c: c.ts):
        if not any(_BACKEND.match(n) for n, _ in q.members):
            qn = next((n for n, _ in q.members if n.startswith("c10d::")), None)
            if qn is not None:
                waiting.setdefault((collective_name(qn), _q_size(q)), deque()).append(q)
    kept = list(queued)
    for b in sorted(alone, key=lambda c: c.ts):
        bname, bargs = b.members[0]
        want, size = collective_name(bname), _arg_dims(bargs, 0)
        lines = [waiting.get((want, size)), waiting.get((want, -1))]
        if want == "allreduce":  # gloo reduce-scatters by all-reducing the whole input (FSDP2 on CPU)
            lines.append(waiting.get(("reduce_scatter", size)))
        line = next((q for q in lines if q and q[0].ts <= b.ts), None)
        if line:  # first in, first out
            line.popleft().backend.append((bname, b.ts, b.end, bargs))
        else:
            kept.append(b)
    orphans = _attach_kernels(kept, ev)
    rows, unnamed = [], 0
    for c in kept:
        r = _describe(c, trace)
        if r is None:
            unnamed += [n for n, _ in c.members] == ["record_param_comms"] and not c.kernels
            continue
        rows.append(r)
    rows += _orphan_kernels(orphans)
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("step", "seq")])
    st = steps(ev)
    df.insert(0, "step", _step_of(df["launch_ts"].to_numpy(float), st))
    df = df.sort_values(["launch_ts", "start"], kind="stable", na_position="first").reset_index(drop=True)
    df.loc[df["launch_ts"].isna(), "step"] = -1
    df.insert(1, "seq", df.groupby("step").cumcount().astype(np.int64))
    df = df.sort_values(["step", "seq"], kind="stable").reset_index(drop=True)
    for col in ("step", "elements", "out_elements", "bytes", "group_size", "stream", "kernels"):
        df[col] = df[col].astype(np.int64)
    df.attrs["not_collectives"] = int(unnamed)
    return df[COLUMNS]


def _q_size(c: _Coll) -> int:
    for n, a in c.members:
        if n.startswith("c10d::"):
            return _arg_dims(a, 1) if _OUT_FIRST.match(n) else _arg_dims(a, 0)
    return -1


def _attach_kernels(colls: list[_Coll], ev: pd.DataFrame) -> list[tuple]:
    """Give each collective the communication kernels launched from inside its host span; the rest back."""
    dev = device_events(ev)
    dev = dev[dev["kind"] == COMMUNICATION]
    by_corr: dict[int, list[tuple]] = {}
    for i, (ts, end, stream, name, corr, args) in enumerate(zip(dev["ts"], dev["end"], dev["stream"], dev["name"],
                                                                 dev["correlation"], dev["args"])):
        by_corr.setdefault(int(corr) if corr >= 0 else -1 - i, []).append(
            (float(ts), float(end), int(stream), name, args))
    rt = runtime_events(ev)
    rt = rt[rt["correlation"].isin(by_corr.keys())]
    threads = {k: (g["ts"].to_numpy(float), g["correlation"].to_numpy()) for k, g in rt.groupby(["pid", "tid"])}
    for c in colls:
        t = threads.get((c.pid, c.tid))
        if t is None:
            continue
        lo, hi = np.searchsorted(t[0], c.ts, "left"), np.searchsorted(t[0], c.end, "right")
        for corr in t[1][lo:hi]:
            c.kernels.extend(by_corr.pop(int(corr), []))
    return [k for ks in by_corr.values() for k in ks]


def _orphan_kernels(kernels: list[tuple]) -> list[dict]:
    """Rows for communication kernels no host collective launched (launched before the trace began)."""
    rows = []
    for k in sorted(kernels, key=lambda k: k[0]):
        c = _Coll("", "", math.nan, math.nan)
        c.kernels.append(k)
        r = _describe(c, _NO_TRACE)
        if r is not None:
            r["source"] = "kernel"
            rows.append(r)
    return rows


class _NoTrace:
    distributed: dict = {}


_NO_TRACE = _NoTrace()


def _step_of(ts: np.ndarray, st: pd.DataFrame) -> np.ndarray:
    """The step whose host span holds each time; -1 outside every step."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if st.empty or not len(ts):
        return out
    st = st.sort_values("ts")
    starts, ends, nums = st["ts"].to_numpy(float), st["end"].to_numpy(float), st["step"].to_numpy()
    i = np.searchsorted(starts, ts, side="right") - 1
    ok = (i >= 0) & ~np.isnan(ts)
    ok[ok] &= ts[ok] < ends[i[ok]]
    out[ok] = nums[i[ok]]
    return out


def ddp_buckets(trace: KinetoTrace, colls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per step, the all-reduces DDP issued from backward: its gradient buckets, in launch order.

    Parameters
    ----------
    trace : KinetoTrace
    colls : pandas.DataFrame, optional
        ``collectives(trace)``, when the caller has it already.

    Returns
    -------
    pandas.DataFrame
        ``step``, ``bucket`` (0, 1, … in launch order within the step), ``elements``, ``dtype``,
        ``bytes``, ``group_size``, ``launch_ts``, ``start``, ``end``. Steps with no such
        all-reduce have no rows.
    """
    c = collectives(trace) if colls is None else colls
    c = c[(c["name"] == "allreduce") & (c["step"] >= 0)]
    ev = trace.events
    bwd = ev[ev["name"].str.startswith("autograd::engine::evaluate_function")]
    spans = {k: (g["ts"].to_numpy(float), g["end"].to_numpy(float)) for k, g in bwd.groupby(["pid", "tid"])}
    inside = []
    for pid, tid, ts in zip(c["pid"], c["tid"], c["launch_ts"]):
        s = spans.get((pid, tid))
        inside.append(bool(s is not None and ((s[0] <= ts) & (ts < s[1])).any()))
    b = c[np.asarray(inside, dtype=bool)].copy()
    b["bucket"] = b.groupby("step").cumcount().astype(np.int64)
    return b[["step", "bucket", "elements", "dtype", "bytes", "group_size", "launch_ts", "start", "end"]] \
        .reset_index(drop=True)
