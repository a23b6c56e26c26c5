"""Every docstring example in dlsched/ runs (issue 14: one home for each contract).

Each module is imported by its dotted name, which is its path under the
repository root, and its examples run with :mod:`doctest` (``ELLIPSIS``), from
the repository root, so that examples can name ``examples/torch_models.py``.

No module is excluded: none imports a framework at import time. Examples that
need a framework run when it is installed (the ``test`` extra installs them all)
and are skipped otherwise (:data:`NEEDS`). ``# doctest: +SKIP`` is kept to the
few examples that need a real model build, a recorded file or a live peer.
"""
from __future__ import annotations

import doctest
import importlib
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Source folder → its package: import paths are file paths.
PACKAGES = {"dlsched": "dlsched"}

# Modules whose examples need a framework (the module itself imports without it).
NEEDS = {
    "dlsched.factory": "torch",
    "dlsched.hooks.ordered_allreduce": "torch",
    "dlsched.hooks.torch_ps": "torch",
    "dlsched.importers.onnx_importer": "onnx",
    "dlsched.importers.torch_importer": "torch",
    "dlsched.jobs.eager_sgd": "torch",
    "dlsched.planning.measure": "torch",
    "dlsched.profiling.torch_profiler": "torch",
}

FLAGS = doctest.ELLIPSIS


def _modules() -> dict[str, Path]:
    """Dotted name → source file, for every module of the package."""
    mods = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join((package, *parts))] = path
    return mods


MODULES = _modules()
WITH_EXAMPLES = sorted(name for name, path in MODULES.items() if ">>>" in path.read_text(encoding="utf-8"))


def _doctests(name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(name)
    # The installed name must resolve to this very file: a wrong mapping would test another copy.
    assert Path(module.__file__).resolve() == MODULES[name].resolve(), (name, module.__file__)
    return sorted(doctest.DocTestFinder(exclude_empty=True).find(module), key=lambda t: t.name)


def test_every_module_with_examples_is_collected():
    assert len(MODULES) > 50 and len(WITH_EXAMPLES) >= 30
    assert {"dlsched.cli.main", "dlsched.formats.gantt", "dlsched.analyses.bounds"} <= set(MODULES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_every_prompt_is_in_a_docstring(name):
    """Each ``>>>`` line of the file is an example doctest finds (none hides in a comment or a nested function)."""
    prompts = sum(line.lstrip().startswith(">>>") for line in MODULES[name].read_text(encoding="utf-8").splitlines())
    found = sum(len(t.examples) for t in _doctests(name))
    assert found == prompts, f"{name}: {prompts} '>>>' lines in the file, {found} examples found by doctest"


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples(name, monkeypatch):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    monkeypatch.chdir(ROOT)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    tests = _doctests(name)
    failed = sum(runner.run(test, out=report.write).failed for test in tests)
    assert failed == 0, report.getvalue()
