"""The public traces of real runs in ``../shared/traces`` (never copied into the project)."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shared_trace(name: str) -> Path:
    """Path of a public trace: ``$DLSCHED_SHARED_TRACES``, ``../shared/traces`` beside the checkout, or /work/shared/traces."""
    for d in (os.environ.get("DLSCHED_SHARED_TRACES"), REPO.parent / "shared" / "traces", Path("/work/shared/traces")):
        if d and (Path(d) / name).is_file():
            return Path(d) / name
    raise FileNotFoundError(f"public trace {name} not found (set DLSCHED_SHARED_TRACES to the folder holding ../shared/traces)")
