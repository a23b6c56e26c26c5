"""Read a Chrome-trace JSON file (a PyTorch profiler / Kineto trace, a TF timeline) as a stream.

Traces of real jobs run to hundreds of megabytes per rank, so the file is
never held whole: gzip is inflated chunk by chunk, the text decoded
incrementally, and each event of ``traceEvents`` parsed on its own with the
C JSON decoder (``raw_decode``) and reduced at once to a row of columns. Only
the arguments later layers read are kept (:data:`KEPT_ARGS`); a kernel keeps
its stream and correlation id as columns. Memory grows with the events, not
with the file's text.

What cannot be right is refused with a :class:`TraceError` that names the
file: a missing or truncated file, a corrupt compressed block, text that is
not JSON, JSON that is not a trace (a PyTorch *Execution Trace* is named as
such), nesting deeper than any trace has (:data:`MAX_DEPTH`), an event or a
header value larger than :data:`MAX_EVENT_CHARS`, a file that inflates past
``max_bytes`` (a gzip bomb), and an event with a negative duration.

The result, :class:`KinetoTrace`, holds the complete (``"ph": "X"``) events as
one DataFrame sorted by start, the top-level header (``distributedInfo``,
``deviceProperties`` …) and the rank it names.
"""
from __future__ import annotations

import codecs
import gc
import json
import math
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dlsched.errors import DlschedError


class TraceError(DlschedError):
    """A trace file is unreadable or not a Chrome/Kineto trace."""


#: The most text a trace may inflate to. Past it the file is refused as a gzip bomb or a trace too
#: large for one process; ``DLSCHED_MAX_TRACE_BYTES`` raises it.
MAX_TRACE_BYTES = 2 * 2**30
#: A gzip that inflates more than this many times its size, past :data:`BOMB_FLOOR` bytes, is a bomb:
#: Kineto traces compress 10–30×; a bomb is refused before it fills memory or the disk cache.
MAX_GZIP_RATIO = 200
BOMB_FLOOR = 64 * 2**20
#: The longest single event (or header value) in characters; real events are well under 100 kB.
MAX_EVENT_CHARS = 16 * 2**20
#: The deepest nesting of brackets in one event; traces nest arguments a few levels deep.
MAX_DEPTH = 64
_CHUNK = 4 * 2**20
_GZ_CHUNK = 256 * 2**10  # compressed bytes per read: small, so the bomb check sees the true ratio early
#: Timestamps and durations beyond this (microseconds, about 30,000 years) are corruption, not time.
MAX_TIME_US = 1e18

#: Arguments kept per event (everything else is dropped while streaming). Shapes and types for
#: matching ops; the collective's description from ``record_param_comms`` and NCCL kernels.
KEPT_ARGS = frozenset({
    "Input Dims", "Input type", "Concrete Inputs", "Collective name", "In msg nelems", "Out msg nelems",
    "In msg size", "Out msg size", "dtype", "Group size", "Process Group Name", "Process Group Description",
    "Process Group Ranks", "Rank", "Global rank start", "Global rank stride", "Sequence number",
    "In split size", "Out split size", "device", "stream", "Ev Idx", "Profiler Event Index",
    "Trace iteration",
})
#: Event categories whose arguments are never read (their ids become columns).
_BARE_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "runtime", "python_function",
                        "gpu_memcpy", "gpu_memset", "ac2g", "fwdbwd", "Trace"})
COLUMNS = ["name", "cat", "pid", "tid", "ts", "dur", "end", "correlation", "external_id", "stream", "args"]


@dataclass
class KinetoTrace:
    """One trace file, read.

    Attributes
    ----------
    path : Path
    events : pandas.DataFrame
        One row per complete event, sorted by ``ts``: ``name``, ``cat`` ('' when absent), ``pid``,
        ``tid`` (as strings), ``ts``, ``dur``, ``end`` (microseconds), ``correlation``,
        ``external_id``, ``stream`` (-1 when absent) and ``args`` (a dict of :data:`KEPT_ARGS`, or None).
    meta : dict
        The document's other top-level keys (``distributedInfo``, ``deviceProperties``, …).
    rank, world_size : int or None
        From ``distributedInfo``.
    counts : dict
        ``events`` (all of ``traceEvents``), ``complete``, ``skipped`` (not objects, or no finite
        ``ts``), ``bytes`` (text read).
    """

    path: Path
    events: pd.DataFrame
    meta: dict = field(default_factory=dict)
    rank: int | None = None
    world_size: int | None = None
    counts: dict = field(default_factory=dict)

    @property
    def distributed(self) -> dict:
        d = self.meta.get("distributedInfo")
        return d if isinstance(d, dict) else {}


class _Text:
    """The file's text, inflated and decoded a chunk at a time; ``buf[pos:]`` is what is left."""

    def __init__(self, path: Path, max_bytes: int):
        self.path, self.max_bytes = path, max_bytes
        try:
            self.f = open(path, "rb")
        except FileNotFoundError:
            raise TraceError(f"{path}: no such trace file") from None
        except IsADirectoryError:
            raise TraceError(f"{path}: is a directory, not a trace file") from None
        except OSError as e:
            raise TraceError(f"{path}: cannot open the trace ({e.strerror})") from None
        head = self.f.read(2)
        self.f.seek(0)
        self.gzip = head == b"\x1f\x8b"
        self.inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if self.gzip else None
        self.decode = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof, self.read = "", 0, False, 0

    def close(self) -> None:
        self.f.close()

    def _raw(self) -> bytes:
        """The next inflated bytes; b'' at the end of the file."""
        if not self.gzip:
            return self.f.read(_CHUNK)
        out = b""
        # Small compressed reads keep the bomb check's ratio true, but return text in large pieces:
        # each piece costs the event loop a batch and a cut event, so 4 MiB pieces read twice as fast.
        while len(out) < _CHUNK // 2:
            if out and self.inflate.eof and not self.inflate.unused_data:
                break  # a member ended: hand over what it gave before reading on
            if self.inflate.eof:  # a member ended: another may follow (gzip allows several)
                rest = self.inflate.unused_data
                self.inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                data = rest or self.f.read(_GZ_CHUNK)
                if not data:
                    return out
            else:
                data = self.inflate.unconsumed_tail or self.f.read(_GZ_CHUNK)
                if not data:
                    raise TraceError(f"{self.path}: the gzip stream ends early: the file is truncated "
                                     "(an interrupted copy or export?)")
            try:
                out += self.inflate.decompress(data, _CHUNK - len(out))
            except zlib.error as e:
                raise TraceError(f"{self.path}: the gzip data is corrupt ({e}); the file was damaged in a "
                                 "copy or is not a gzip of a trace") from None
        return out

    def more(self) -> bool:
        """Append the next chunk of text; False at the end of the file."""
        if self.eof:
            return False
        try:
            raw = self._raw()
        except OSError as e:
            raise TraceError(f"{self.path}: cannot read the trace ({e})") from None
        self.read += len(raw)
        if self.gzip and self.read > BOMB_FLOOR and self.read > MAX_GZIP_RATIO * max(self.f.tell(), 1):
            raise TraceError(
                f"{self.path}: {self.f.tell() / 2**20:.1f} MiB of gzip already inflate to {self.read / 2**20:.0f} MiB "
                f"of text, more than {MAX_GZIP_RATIO}× (traces compress 10–30×): a gzip bomb, not a trace; refused "
                "before it fills memory")
        if self.read > self.max_bytes:
            raise TraceError(
                f"{self.path}: the trace inflates past {self.max_bytes / 2**30:.1f} GiB of text (a gzip bomb, or "
                "a trace too large for one process); split the profile into shorter windows "
                "(torch.profiler's schedule), or raise the limit with DLSCHED_MAX_TRACE_BYTES")
        try:
            text = self.decode.decode(raw, final=not raw)
        except UnicodeDecodeError as e:
            raise TraceError(f"{self.path}: not a text trace file ({e.reason} at byte {self.read - len(raw) + e.start}); "
                             "expected Chrome-trace JSON such as a PyTorch profiler trace") from None
        if not raw:
            self.eof = True
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        return bool(raw) or bool(text)

    def skip_ws(self) -> str:
        """The next non-blank character ('' at the end), reading on as needed."""
        while True:
            m = _WS.match(self.buf, self.pos)
            self.pos = m.end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def expect(self, chars: str, where: str) -> str:
        c = self.skip_ws()
        if c == "" or c not in chars:
            self.fail(f"expected {' or '.join(repr(x) for x in chars)} {where}", c)
        self.pos += 1
        return c

    def fail(self, what: str, c: str = "") -> None:
        if c == "" and self.eof:
            raise TraceError(f"{self.path}: the JSON ends early ({what}): the file is truncated (an interrupted "
                             "copy or a profiler that did not finish exporting)")
        raise TraceError(f"{self.path}: not a JSON trace file ({what}, found {self.buf[self.pos:self.pos + 20]!r} at "
                         f"character {self.read - len(self.buf) + self.pos}); expected Chrome-trace JSON such as a "
                         "PyTorch profiler trace (export_chrome_trace) or a TF timeline")

    def value(self, decoder: json.JSONDecoder, what: str):
        """Decode the JSON value at the cursor, reading more text while it is incomplete."""
        self.skip_ws()
        while True:
            start = self.pos
            end_of_buf = len(self.buf)
            try:
                if _too_deep(self.buf, start, end_of_buf):
                    raise TraceError(f"{self.path}: {what} nests more than {MAX_DEPTH} levels deep, deeper "
                                     "than any trace does; the file is not a trace (or was written to break parsers)")
                obj, end = decoder.raw_decode(self.buf, start)
            except json.JSONDecodeError as e:
                if self.eof or len(self.buf) - start > MAX_EVENT_CHARS:
                    if not self.eof:
                        raise TraceError(f"{self.path}: {what} is longer than {MAX_EVENT_CHARS // 2**20} MiB of "
                                         "text; no trace event is that large") from None
                    cut = e.pos >= len(self.buf) - 1 or e.msg.startswith("Unterminated string")  # the text stops mid-value
                    self.fail(f"{e.msg.replace(' starting at', '')} in {what}", "" if cut else "x")
                self.more()
                continue
            except RecursionError:
                raise TraceError(f"{self.path}: {what} nests deeper than any trace does; the file is not a "
                                 "trace") from None
            if end >= end_of_buf and not self.eof:  # a number cut at the chunk's end may go on
                self.more()
                continue
            self.pos = end
            return obj


_WS = re.compile(r"[ \t\n\r]*")
_BRACKETS = re.compile(r"[\[\]{}\"\\]")


def _too_deep(buf: str, start: int, stop: int) -> bool:
    """True when the value at ``start`` opens more than :data:`MAX_DEPTH` brackets before closing them.

    Only values that open with many brackets in a row are scanned in full; an ordinary event is
    checked by its first characters.
    """
    head = buf[start:start + MAX_DEPTH + 1]
    if head.count("[") + head.count("{") <= MAX_DEPTH // 2:
        return False
    depth, in_str, esc = 0, False, False
    for m in _BRACKETS.finditer(buf, start, min(stop, start + MAX_EVENT_CHARS)):
        c = m.group()
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return False
    return False


def _int(v) -> int:
    if isinstance(v, bool):
        return -1
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    return -1


class _Columns:
    def __init__(self, keep: frozenset | None):
        self.keep = keep
        self.name, self.cat, self.pid, self.tid = [], [], [], []
        self.ts, self.dur, self.corr, self.ext, self.stream, self.args = [], [], [], [], [], []
        self.events = self.skipped = 0

    def add(self, batch: list, path: Path) -> None:
        """Reduce parsed events to rows (one loop with local appends: this is the reader's hot path)."""
        name_a, cat_a, pid_a, tid_a = self.name.append, self.cat.append, self.pid.append, self.tid.append
        ts_a, dur_a, corr_a, ext_a = self.ts.append, self.dur.append, self.corr.append, self.ext.append
        stream_a, args_a, keep, isfinite = self.stream.append, self.args.append, self.keep, math.isfinite
        self.events += len(batch)
        for ev in batch:
            if type(ev) is not dict:
                self.skipped += 1
                continue
            if ev.get("ph") != "X":
                continue
            try:
                ts, dur = float(ev["ts"]), float(ev.get("dur", 0))
            except (KeyError, TypeError, ValueError):
                self.skipped += 1
                continue
            if not (isfinite(ts) and isfinite(dur)):
                self.skipped += 1
                continue
            name = ev.get("name")
            if dur < 0:
                raise TraceError(f"{path}: event {name!r} at ts={ts:g} has a negative duration ({dur:g} us); the "
                                 "trace is corrupt")
            cat = ev.get("cat")
            cat = cat if type(cat) is str else ""
            args = ev.get("args")
            corr = ext = stream = -1
            kept = None
            if type(args) is dict:
                v = args.get("correlation")
                if v is not None:
                    corr = v if type(v) is int else _int(v)
                v = args.get("External id")
                if v is not None:
                    ext = v if type(v) is int else _int(v)
                v = args.get("stream")
                if v is not None:
                    stream = v if type(v) is int else _int(v)
                if keep is None:
                    kept = args
                elif cat not in _BARE_CATS:
                    kept = {k: v for k, v in args.items() if k in keep} or None
            name_a(name if type(name) is str else "")
            cat_a(cat)
            pid_a(str(ev.get("pid", "")))
            tid_a(str(ev.get("tid", "")))
            ts_a(ts)
            dur_a(dur)
            corr_a(corr)
            ext_a(ext)
            stream_a(stream)
            args_a(kept)

    def frame(self, path: Path) -> pd.DataFrame:
        ts = np.asarray(self.ts, dtype=float)
        dur = np.asarray(self.dur, dtype=float)
        bad = np.flatnonzero((np.abs(ts) > MAX_TIME_US) | (dur > MAX_TIME_US))
        if len(bad):
            i = int(bad[0])
            raise TraceError(f"{path}: event {self.name[i]!r} has ts={ts[i]:.3g} us and dur={dur[i]:.3g} us, past "
                             f"{MAX_TIME_US:.0e} us (some 30,000 years), so its span would overflow every figure "
                             "built on it; the trace is corrupt")
        df = pd.DataFrame({
            "name": self.name, "cat": self.cat, "pid": self.pid, "tid": self.tid, "ts": ts, "dur": dur,
            "end": ts + dur, "correlation": np.asarray(self.corr, dtype=np.int64),
            "external_id": np.asarray(self.ext, dtype=np.int64), "stream": np.asarray(self.stream, dtype=np.int64),
            "args": self.args}, columns=COLUMNS)
        return df.sort_values("ts", kind="stable", ignore_index=True)


def _is_execution_trace(key: str) -> bool:
    return key in ("nodes", "schema", "start_ts", "finish_ts")


def read_kineto(path: str | Path, max_bytes: int | None = None,
                keep_args: frozenset | None = KEPT_ARGS) -> KinetoTrace:
    """Read a Chrome-trace / Kineto JSON file (optionally gzipped) as a stream (module docstring).

    Parameters
    ----------
    path : str or Path
    max_bytes : int, optional
        The most text the file may inflate to; default :data:`MAX_TRACE_BYTES` or
        ``DLSCHED_MAX_TRACE_BYTES``.
    keep_args : frozenset or None
        The argument keys kept per event; None keeps every event's whole ``args`` (small traces
        whose arguments name ops: TF timelines, dlsched's own traces).

    Returns
    -------
    KinetoTrace

    Raises
    ------
    TraceError
        Every message starts with the file's name and says what is wrong with it.

    Examples
    --------
    >>> import json, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.json")
    >>> _ = open(p, "w").write(json.dumps({"distributedInfo": {"rank": 3}, "traceEvents": [
    ...     {"ph": "M", "name": "process_name"}, {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 5,
    ...     "args": {"correlation": 7, "stream": 7}}]}))
    >>> t = read_kineto(p)
    >>> t.rank, list(t.events[["name", "ts", "end", "correlation"]].itertuples(index=False, name=None))
    (3, [('k', 10.0, 15.0, 7)])
    """
    path = Path(path)
    if max_bytes is None:
        max_bytes = int(os.environ.get("DLSCHED_MAX_TRACE_BYTES", MAX_TRACE_BYTES))
    text = _Text(path, max_bytes)
    cols, meta, saw_events = _Columns(keep_args), {}, False
    decoder = json.JSONDecoder()
    # Decoding makes millions of containers and no cycles: the cyclic collector would scan them all
    # again and again (over half the time of a 1,000,000-event trace) and find nothing to free.
    collecting = gc.isenabled()
    gc.disable()
    try:
        first = text.skip_ws()
        if first == "[":
            text.pos += 1
            _read_events(text, decoder, cols, path)
            saw_events = True
        elif first == "{":
            text.pos += 1
            if text.skip_ws() == "}":
                text.pos += 1
            else:
                while True:
                    if text.skip_ws() != '"':
                        text.fail("expected a key in the trace's top-level object", text.skip_ws())
                    key = text.value(decoder, "a top-level key")
                    text.expect(":", f"after the key {key!r}")
                    if key == "traceEvents":
                        if text.skip_ws() != "[":
                            raise TraceError(f"{path}: 'traceEvents' is not a list; not a Chrome trace")
                        text.pos += 1
                        _read_events(text, decoder, cols, path)
                        saw_events = True
                    elif _is_execution_trace(key) and not saw_events:
                        raise TraceError(
                            f"{path}: this is a PyTorch Execution Trace (ExecutionTraceObserver: the host graph of ops "
                            "and tensors, with no times on devices), not a timing trace. dlsched reads the Kineto "
                            "trace recorded beside it: torch.profiler.profile(...) with export_chrome_trace(...) or "
                            "on_trace_ready=tensorboard_trace_handler(...), one JSON per rank")
                    else:
                        meta[key] = text.value(decoder, f"the top-level value {key!r}")
                    if text.expect(",}", "between top-level entries") == "}":
                        break
        elif first == "":
            raise TraceError(f"{path}: the file is empty; expected Chrome-trace JSON such as a PyTorch profiler trace")
        else:
            text.fail("expected '{' or '[' to open the trace", first)
        if text.skip_ws() != "":
            text.fail("text after the end of the trace's JSON", "x")
    finally:
        text.close()
        if collecting:
            gc.enable()
    if not saw_events:
        raise TraceError(f"{path}: not a Chrome trace (expected a list of events or an object with a "
                         "'traceEvents' list)")
    events = cols.frame(path)
    if events.empty:
        raise TraceError(f"{path}: the trace holds no complete ('ph': 'X') events with ts/dur")
    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    rank, world = _int(dist.get("rank", -1)), _int(dist.get("world_size", -1))
    return KinetoTrace(path=path, events=events, meta=meta, rank=rank if rank >= 0 else None,
                       world_size=world if world > 0 else None,
                       counts={"events": cols.events, "complete": len(events), "skipped": cols.skipped,
                               "bytes": text.read})


def _read_events(text: _Text, decoder: json.JSONDecoder, cols: _Columns, path: Path) -> None:
    """Parse the events of an open ``[`` up to its ``]``.

    Fast path: the text up to the last ``}`` followed by a comma is decoded as one list in C.
    Starting at an event boundary, that only succeeds when the cut is itself a boundary (a cut
    inside an event leaves a bracket or a string open), so a failure falls back to one event.
    """
    if text.skip_ws() == "]":
        text.pos += 1
        return
    while True:
        buf, pos = text.buf, text.pos
        batch, end = None, len(buf)
        # A nested object's "}," inside the event cut at the buffer's end looks like a boundary too:
        # try the candidates before it (a few; each is a whole event or a nested object earlier),
        # else every later pass would parse the same text up to the same false cut again.
        for _ in range(_CUT_TRIES):
            cut = _last_boundary(buf, pos, end)
            if cut <= pos:
                break
            try:
                batch = json.loads("[" + buf[pos:cut] + "]")
                break
            except (ValueError, RecursionError):
                end = buf.rfind("}", pos, cut)
        if batch is not None:
            cols.add(batch, path)
            text.pos = cut + 1  # past the comma
            if text.skip_ws() == "":
                text.fail("expected another event after ','")
            continue
        cols.add([text.value(decoder, f"event {cols.events}")], path)
        if text.expect(",]", f"after event {cols.events - 1}") == "]":
            return


_BOUNDARY = re.compile(r"\}[ \t\n\r]*,")
_CUT_TRIES = 4


def _last_boundary(buf: str, pos: int, end: int | None = None) -> int:
    """Index of the last comma that follows a ``}`` in ``buf[pos:end]`` (-1 if none)."""
    end = len(buf) if end is None else end
    while True:
        i = buf.rfind("}", pos, end)
        if i < 0:
            return -1
        m = _BOUNDARY.match(buf, i)
        if m:
            return m.end() - 1
        end = i
        if len(buf) - end > 2 * _CHUNK:
            return -1


def complete_events(path: str | Path) -> list[dict]:
    """The complete events as dicts (``name, cat, pid, tid, ts, dur, args``): for small traces and old callers."""
    t = read_kineto(path, keep_args=None)
    cols = ["name", "cat", "pid", "tid", "ts", "dur", "args"]
    return [{k: v for k, v in zip(cols, row)} for row in t.events[cols].itertuples(index=False, name=None)]


#: The names of trace files in a folder of per-rank traces.
TRACE_SUFFIXES = (".json", ".json.gz")


def read_kineto_dir(folder: str | Path, max_bytes: int | None = None) -> list[KinetoTrace]:
    """Every trace file (``*.json``, ``*.json.gz``) directly in ``folder``, by file name: one per rank.

    Which rank each is, is the analyses' business (``distributedInfo.rank``, else the file name).

    Raises
    ------
    TraceError
        ``folder`` is not a folder, holds no trace file, or one of them is not a readable trace
        (the message names that file).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise TraceError(f"{folder}: not a folder; give the folder holding one trace file per rank "
                         "(torch.profiler's export_chrome_trace or tensorboard_trace_handler output)")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    if not files:
        raise TraceError(f"{folder}: no trace files (*.json, *.json.gz) in this folder; give the folder holding one "
                         "trace file per rank")
    return [read_kineto(p, max_bytes=max_bytes) for p in files]
