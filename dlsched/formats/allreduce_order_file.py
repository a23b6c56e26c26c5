"""All-reduce order files: the ordered all-reduce's pieces in issue order (issue 29 item 4, docs/plan-ddp.md).

Written by ``dlsched plan-ddp --write-order FILE``, read by the ordered
all-reduce hook. JSON (versioned)::

    {"format": "dlsched-allreduce-order", "version": 1,
     "model": {"name": str, "fingerprint": str},
     "world": int, "piece_bytes": int,
     "pieces": [{"slices": [["features.0.weight", 0, 1728], ...], "bytes": int, "priority": int}, ...]}

``pieces`` is in issue order: every rank issues piece ``i`` after piece
``i−1``. A slice ``[name, start, stop]`` indexes ``param.grad.view(-1)`` of
``module.named_parameters()``'s ``name``. This reader checks the file's form
(types, ``0 ≤ start < stop``, non-negative sizes); whether the slices cover
each parameter of the module once is checked by the hook against the module
(and by :func:`dlsched.analyses.ddp_step.check_cover` against a DAG).

Examples
--------
>>> import tempfile, os
>>> f = OrderFile("m", "abc", 2, 16, [OrderPiece((("w", 0, 4),), 16, 0)])
>>> path = os.path.join(tempfile.mkdtemp(), "o.json")
>>> write_order_file(f, path)
>>> read_order_file(path) == f
True
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from dlsched.atomic import atomic_write_text
from dlsched.errors import DlschedError

FORMAT = "dlsched-allreduce-order"
VERSION = 1


class OrderFileError(DlschedError):
    """An all-reduce order file that cannot be read or is not one."""


@dataclass(frozen=True)
class OrderPiece:
    """Slices ``(param, start, stop)`` all-reduced together, their bytes and priority (lower: more urgent)."""

    slices: tuple[tuple[str, int, int], ...]
    bytes: int
    priority: int


@dataclass(frozen=True)
class OrderFile:
    """A parsed order file: the model it was made for, the world size, the piece size and the pieces."""

    model_name: str
    fingerprint: str
    world: int
    piece_bytes: int
    pieces: list[OrderPiece]

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION,
                "model": {"name": self.model_name, "fingerprint": self.fingerprint},
                "world": self.world, "piece_bytes": self.piece_bytes,
                "pieces": [{"slices": [list(s) for s in p.slices], "bytes": p.bytes, "priority": p.priority}
                           for p in self.pieces]}


def write_order_file(order: OrderFile, path: str | Path) -> None:
    """Write ``order`` as JSON, one piece a line, atomically (a reader never sees half a file)."""
    data = order.to_dict()
    pieces = data.pop("pieces")
    head = json.dumps(data)[:-1]
    lines = ",\n  ".join(json.dumps(p) for p in pieces)
    atomic_write_text(path, f"{head},\n \"pieces\": [\n  {lines}\n ]}}\n")


def read_order_file(path: str | Path) -> OrderFile:
    """Read and check an order file's form.

    Raises
    ------
    OrderFileError
        Unreadable, not JSON, another format or version, or a field of the
        wrong type or range (the message names the file and the field).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise OrderFileError(f"cannot read the all-reduce order file {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise OrderFileError(f"{path} is not an all-reduce order file: it is not JSON ({e})") from None
    return parse_order(data, str(path))


def parse_order(data, where: str = "the all-reduce order") -> OrderFile:
    """An :class:`OrderFile` from the JSON object ``data`` (:func:`read_order_file`'s checks)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise OrderFileError(f"{where} is not an all-reduce order file (expected \"format\": \"{FORMAT}\"); "
                             "write one with dlsched plan-ddp MODEL --write-order FILE")
    if data.get("version") != VERSION:
        raise OrderFileError(f"{where} is version {data.get('version')!r} of the all-reduce order format; this "
                             f"dlsched reads version {VERSION}: write it again with this dlsched's plan-ddp")
    model = data.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("name"), str) \
            or not isinstance(model.get("fingerprint"), str):
        raise OrderFileError(f"{where}: \"model\" must be an object with a string \"name\" and \"fingerprint\"")
    world = _count(data.get("world"), "world", where)
    if world < 1:
        raise OrderFileError(f"{where}: \"world\" must be at least 1, got {world}")
    piece_bytes = _count(data.get("piece_bytes"), "piece_bytes", where)
    raw = data.get("pieces")
    if not isinstance(raw, list) or not raw:
        raise OrderFileError(f"{where}: \"pieces\" must be a non-empty list")
    return OrderFile(model["name"], model["fingerprint"], world, piece_bytes,
                     [_piece(p, i, where) for i, p in enumerate(raw)])


def _count(value, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or value < 0:
        raise OrderFileError(f"{where}: {what} must be a whole number ≥ 0, got {value!r}")
    return int(value)


def _piece(p, i: int, where: str) -> OrderPiece:
    if not isinstance(p, dict) or not isinstance(p.get("slices"), list) or not p["slices"]:
        raise OrderFileError(f"{where}: piece {i} must be an object with a non-empty list \"slices\"")
    slices = []
    for s in p["slices"]:
        if not (isinstance(s, list) and len(s) == 3 and isinstance(s[0], str) and s[0]):
            raise OrderFileError(f"{where}: piece {i} has a slice {s!r}; a slice is [\"param.name\", start, stop]")
        start, stop = _count(s[1], f"piece {i}'s start", where), _count(s[2], f"piece {i}'s stop", where)
        if stop <= start:
            raise OrderFileError(f"{where}: piece {i} has the empty or reversed slice {s!r} (needs start < stop)")
        slices.append((s[0], start, stop))
    return OrderPiece(tuple(slices), _count(p.get("bytes"), f"piece {i}'s bytes", where),
                      _count(p.get("priority"), f"piece {i}'s priority", where))
