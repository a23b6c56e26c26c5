"""CI baseline files written by ``dlsched snapshot`` and read by ``dlsched check``.

JSON, sorted keys, no timestamp, so two snapshots of the same model are
byte-identical::

    {"format": "dlsched.baseline", "version": 1, "dlsched_version": "0.1.0",
     "model": {"spec": ..., "name": ..., "fingerprint": ..., "mode": ...},
     "options": {"mode": ..., "batch": ..., "ps": ..., "device_spec": "cpu", "oracle": null,
                 "memory": "16GiB", "margin": 0.1, "optimizer": "sgd", "default_time": null},
     "metrics": {...}, "op_types": {...}, "tolerances": {"metric": 0.05}}
"""
from __future__ import annotations

import json
from pathlib import Path

from dlsched.errors import DlschedError

from .atomic import atomic_write_text

FORMAT = "dlsched.baseline"
VERSION = 1


def write_baseline(doc: dict, path: str | Path) -> None:
    doc = {"format": FORMAT, "version": VERSION, **doc}
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def read_baseline(path: str | Path) -> dict:
    """Read and validate a baseline file.

    Raises
    ------
    DlschedError
        Missing file, invalid JSON, another format or version, no metrics.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise DlschedError(f"{path}: no such baseline file; create one with dlsched snapshot MODEL -o {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DlschedError(f"{path}: the baseline is corrupt, its JSON does not parse ({e}); "
                           "recreate it with dlsched snapshot or restore it from version control") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DlschedError(f"{path}: not a dlsched baseline (expected format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise DlschedError(f"{path}: unsupported baseline version {doc.get('version')!r} (this dlsched reads {VERSION})")
    if not isinstance(doc.get("metrics"), dict) or not doc["metrics"]:
        raise DlschedError(f"{path}: the baseline has no metrics")
    bad = [k for k, v in doc["metrics"].items() if not isinstance(v, (int, float)) or isinstance(v, bool)]
    if bad:
        raise DlschedError(f"{path}: non-numeric baseline metric(s): {', '.join(bad)}")
    return doc
