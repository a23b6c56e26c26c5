"""Priority files: the transfer order that the hooks enforce (DESIGN §6).

JSON (versioned)::

    {"format": "dlsched.priorities", "version": 1, "algorithm": "tac",
     "model": {"name": ..., "fingerprint": ...}, "oracle": "<hash>" | null,
     "transfers": [{"name": ..., "priority": 0, "bytes": ..., "ps": 0}, ...]}

``transfers`` is sorted by priority (then canonical order). The TicTac TSV
format (``--format tictac``) holds one ``name<TAB>priority`` line per transfer
and carries no fingerprint, so only its names can be checked.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from dlsched.dag import Graph
from dlsched.errors import PriorityFileError

from dlsched.atomic import atomic_write_text

FORMAT = "dlsched.priorities"
VERSION = 1


@dataclass
class Transfer:
    name: str
    priority: int
    bytes: int = 0
    ps: int = 0


@dataclass
class PriorityFile:
    """A parsed priority file."""

    algorithm: str
    transfers: list[Transfer]
    model_name: str | None = None
    fingerprint: str | None = None
    oracle: str | None = None
    version: int = VERSION
    extra: dict = field(default_factory=dict)

    @property
    def priorities(self) -> dict[str, int]:
        """Transfer name → priority number (lower goes first)."""
        return {t.name: t.priority for t in self.transfers}

    @property
    def order(self) -> list[str]:
        """Transfer names, highest priority first."""
        return [t.name for t in self.transfers]


def make_priority_file(graph: Graph, priorities: dict[str, int], algorithm: str,
                       oracle: str | None = None, **extra) -> PriorityFile:
    """Build a :class:`PriorityFile` for ``graph``'s recv ops from a priority map."""
    recvs = graph.recvs()
    unknown = set(priorities) - {r.name for r in recvs}
    if unknown:
        raise PriorityFileError(f"priorities name unknown transfers: {', '.join(sorted(unknown)[:5])}")
    ordered = sorted((r for r in recvs if r.name in priorities), key=lambda r: (priorities[r.name], r.index))
    transfers = [Transfer(r.name, int(priorities[r.name]), int(r.bytes), int(r.ps or 0)) for r in ordered]
    return PriorityFile(algorithm, transfers, graph.name, graph.fingerprint(), oracle, extra=extra)


def write_priority_file(pf: PriorityFile, path: str | Path, fmt: str = "json") -> None:
    """Write atomically as ``json`` or ``tictac`` (``name<TAB>priority``)."""
    if fmt == "tictac":
        awkward = [t.name for t in pf.transfers if any(c in t.name for c in "\t\r\n")]
        if awkward:
            # The TicTac format has no quoting: such a name would split a line the reader then rejects.
            raise PriorityFileError(
                f"{path}: transfer name {awkward[0]!r} holds a tab or a line break, which the TicTac format "
                "cannot represent; write the priority file with --format json instead")
        text = "".join(f"{t.name}\t{t.priority}\n" for t in pf.transfers)
    elif fmt == "json":
        doc = {
            "format": FORMAT, "version": VERSION, "algorithm": pf.algorithm,
            "model": {"name": pf.model_name, "fingerprint": pf.fingerprint},
            "oracle": pf.oracle,
            **pf.extra,
            "transfers": [t.__dict__ for t in pf.transfers],
        }
        text = json.dumps(doc, indent=1) + "\n"
    else:
        raise PriorityFileError(f"unknown priority file format {fmt!r} (json or tictac)")
    atomic_write_text(path, text)


def read_priority_file(path: str | Path, graph: Graph | None = None) -> PriorityFile:
    """Read a JSON or TicTac priority file, checking it against ``graph`` if given.

    Raises
    ------
    PriorityFileError
        Unreadable file, wrong format/version, a JSON file without a model
        fingerprint, a fingerprint of another model, or transfers that
        ``graph`` does not have.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise PriorityFileError(f"{path}: no such priority file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PriorityFileError(f"{path}: cannot read the priority file ({e})") from None
    if text.lstrip().startswith("{"):
        pf = _parse_json(text, path)
    else:
        pf = _parse_tictac(text, path)
    if graph is not None:
        check_against(pf, graph, path)
    return pf


def check_against(pf: PriorityFile, graph: Graph, where: str | Path = "priority file") -> None:
    """Refuse a priority file made for another model or naming unknown transfers."""
    if pf.fingerprint is not None and pf.fingerprint != graph.fingerprint():
        raise PriorityFileError(
            f"{where} was made for model {pf.model_name!r} (fingerprint {pf.fingerprint}), but the model given "
            f"is {graph.name!r} (fingerprint {graph.fingerprint()}, mode {graph.mode}); regenerate it with "
            "dlsched order for this model")
    known = {r.name for r in graph.recvs()}
    unknown = [t.name for t in pf.transfers if t.name not in known]
    if unknown:
        raise PriorityFileError(
            f"{where} names {len(unknown)} transfer(s) that model {graph.name!r} does not have: "
            f"{', '.join(unknown[:5])}{' …' if len(unknown) > 5 else ''}")


def _parse_json(text: str, path: Path) -> PriorityFile:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PriorityFileError(f"{path}: the priority file is not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PriorityFileError(f"{path}: not a dlsched priority file (expected format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise PriorityFileError(f"{path}: unsupported priority file version {doc.get('version')!r} "
                                f"(this dlsched reads version {VERSION})")
    transfers_doc, model = doc.get("transfers"), doc.get("model")
    if not isinstance(transfers_doc, list):
        raise PriorityFileError(f"{path}: 'transfers' must be a list of {{name, priority}} objects")
    if model is not None and not isinstance(model, dict):
        raise PriorityFileError(f"{path}: 'model' must be an object with 'name' and 'fingerprint'")
    model = model or {}
    if not isinstance(model.get("fingerprint"), (str, type(None))):
        raise PriorityFileError(f"{path}: the model fingerprint must be a string")
    if not model.get("fingerprint"):
        # Without one nothing ties the file to a model: a file for another model or mode would pass unchecked.
        raise PriorityFileError(
            f"{path}: the priority file has no model fingerprint, so it cannot be checked against the model; "
            "regenerate it with dlsched order (a TicTac file, --format tictac, is checked by transfer names only)")
    transfers = [_transfer(t, i, path) for i, t in enumerate(transfers_doc)]
    _check_unique(transfers, path)
    extra = {k: v for k, v in doc.items() if k not in ("format", "version", "algorithm", "model", "oracle", "transfers")}
    return PriorityFile(doc.get("algorithm", "?"), transfers, model.get("name"), model.get("fingerprint"),
                        doc.get("oracle"), VERSION, extra)


def _whole(value, what: str, where: str, signed: bool = False) -> int:
    """An integer field; refuse 1.5, "3", true and the like rather than truncate them."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PriorityFileError(f"{where}: {what} must be a whole number, got {value!r}")
    if value < 0 and not signed:
        raise PriorityFileError(f"{where}: {what} must not be negative, got {value!r}")
    return value


def _transfer(t, i: int, path: Path) -> Transfer:
    where = f"{path}: transfer #{i}"
    if not isinstance(t, dict) or not isinstance(t.get("name"), str) or "priority" not in t:
        raise PriorityFileError(f"{where}: expected an object with a string 'name' and a 'priority', got {t!r:.80}")
    return Transfer(t["name"], _whole(t["priority"], "priority", where, signed=True), _whole(t.get("bytes", 0), "bytes", where),
                    _whole(t.get("ps", 0), "ps", where))


def _parse_tictac(text: str, path: Path) -> PriorityFile:
    transfers = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.rstrip("\n").split("\t")
        try:
            if not parts[1].strip().lstrip("-").isdigit():  # int() would also take "1_0"; "1.5" is refused
                raise ValueError
            transfers.append(Transfer(parts[0], int(parts[1])))
        except (IndexError, ValueError):
            raise PriorityFileError(f"{path}:{lineno}: expected 'name<TAB>priority', got {line!r}") from None
    if not transfers:
        raise PriorityFileError(f"{path}: the priority file is empty")
    _check_unique(transfers, path)
    transfers.sort(key=lambda t: t.priority)
    return PriorityFile("tictac", transfers)


def _check_unique(transfers: list[Transfer], path: Path) -> None:
    seen: set[str] = set()
    for t in transfers:
        if t.name in seen:
            raise PriorityFileError(f"{path}: transfer {t.name!r} is listed twice")
        seen.add(t.name)
