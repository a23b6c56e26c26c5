"""Shared test helpers: running the CLI as a user would, and the model cache.

Fixture modules named ``tests/fixtures_*.py`` are loaded as plugins, so each
area keeps its model-building fixtures next to its tests.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DLSCHED_CACHE", REPO / ".cache" / "models"))
CACHE.mkdir(parents=True, exist_ok=True)
EXAMPLES = REPO / "examples"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(REPO))

pytest_plugins = sorted(f"tests.{p.stem}" for p in Path(__file__).parent.glob("fixtures_*.py"))


def run_cli(*args: str, timeout: float = 900, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run ``dlsched ARGS`` in a fresh process; returns the completed process (text)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "dlsched.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or REPO, env=env)


# A framework logger's line (torch's and TF's glog-style "E1125 21:05:01.105 ..." header, onnxruntime's
# "[W:onnxruntime:..."): on success a command's stderr holds dlsched's own warnings only (issue 31).
FRAMEWORK_LOG = re.compile(r"^[EWIF]\d{4} \d\d:\d\d:\d\d|onnxruntime:|tensorflow/|fake_tensor\.py|Traceback", re.M)


def assert_ok_and_quiet(proc: subprocess.CompletedProcess) -> None:
    """Exit code 0 and no framework log line on stderr."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not FRAMEWORK_LOG.search(proc.stderr), proc.stderr


def assert_clean_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit code 2, a message on stderr containing ``needles``, and no traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}, expected 2:\n{out}"
    assert "Traceback" not in out, out
    for n in needles:
        assert n.lower() in out.lower(), f"{n!r} not in:\n{out}"


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    return CACHE


def marked_processes(marker: str, argv_part: bytes) -> dict[int, list[bytes]]:
    """Live processes whose command line holds ``argv_part`` and whose environment sets
    ``DLSCHED_TEST_MARKER=marker``: pid → argv. A zombie's environ reads empty, so it is not counted."""
    found = {}
    needle = f"DLSCHED_TEST_MARKER={marker}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes()
            if argv_part in argv and needle in (d / "environ").read_bytes():
                found[int(d.name)] = argv.split(b"\x00")
        except OSError:  # gone meanwhile, or not ours
            continue
    return found
