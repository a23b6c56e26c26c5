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
import math
from pathlib import Path

from dlsched.errors import DlschedError

from dlsched.atomic import atomic_write_text

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
    bad = [k for k, v in doc["metrics"].items() if not _finite_number(v)]
    if bad:
        # A NaN compares false with everything, so it would pass every check for ever.
        raise DlschedError(f"{path}: baseline metric(s) that are not finite numbers: {', '.join(bad)}; "
                           "recreate the baseline with dlsched snapshot")
    for key in ("model", "options", "tolerances"):
        if not isinstance(doc.get(key, {}), dict):
            raise DlschedError(f"{path}: the baseline's {key!r} must be an object, got {doc[key]!r:.60}")
    bad = [f"{k}={v!r}" for k, v in doc.get("options", {}).items() if k in _OPTION_CHECKS and v is not None
           and not _OPTION_CHECKS[k](v)]
    if bad:
        # Recorded options bypass the command line's own checks, so they are checked here.
        raise DlschedError(f"{path}: the baseline records option value(s) that mean nothing: {', '.join(bad)}; "
                           "recreate the baseline with dlsched snapshot")
    bad = [k for k, v in doc.get("tolerances", {}).items() if not _finite_number(v) or v < 0]
    if bad:
        raise DlschedError(f"{path}: tolerance(s) that are not finite non-negative fractions: {', '.join(bad)}")
    return doc


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


# Recorded option -> what a valid value looks like (None always means "not set").
_OPTION_CHECKS = {
    "mode": lambda v: v in ("inference", "training"),
    "batch": _whole,
    "ps": _whole,
    "ps_strategy": lambda v: v in ("round-robin", "greedy"),
    "buffers": lambda v: isinstance(v, bool),
    "device_spec": lambda v: isinstance(v, str),
    "oracle": lambda v: isinstance(v, str),
    "memory": lambda v: isinstance(v, str),
    "optimizer": lambda v: v in ("sgd", "momentum", "adam"),
    "default_time": lambda v: _finite_number(v) and v >= 0,
    "margin": lambda v: _finite_number(v) and 0 <= v < 1,
}


def _finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
