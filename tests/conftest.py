"""Shared test helpers: running the CLI as a user would, and the model cache.

Fixture modules named ``tests/fixtures_*.py`` are loaded as plugins, so each
area keeps its model-building fixtures next to its tests.
"""
from __future__ import annotations

import os
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
