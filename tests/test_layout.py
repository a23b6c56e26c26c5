"""The tree's shape (docs/architecture.md): import paths are file paths, small answers and commands, hooks that are hooks.

The layers themselves are import-linter's contract (pyproject.toml, ``make layers``); here what it cannot say.
"""
from __future__ import annotations

import ast
import inspect
import tomllib
from pathlib import Path

import click
import pytest

from dlsched.cli.main import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dlsched"
MAX_PARAMETERS = 8
MAX_COMMAND_LINES = 120
# What a training script imports: the PS hook and its two sides, the TF hook, the partial collectives,
# the ordered all-reduce, the DDP plan's keywords.
HOOKS = {"__init__.py", "torch_ps.py", "ps_worker.py", "ps_server.py", "tf_order.py", "partial_allreduce.py",
         "ordered_allreduce.py", "ddp_plan.py", "fsdp.py"}


def _imported_modules(path: Path) -> set[str]:
    names = set()
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            names.add(base)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n.split(".")[0] == "dlsched"}


def test_every_import_names_a_file():
    """``dlsched.a.b`` is ``dlsched/a/b.py`` or ``dlsched/a/b/__init__.py``: no package-dir mapping."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "package-dir" not in project.get("tool", {}).get("setuptools", {})
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in _imported_modules(path):
            target = ROOT.joinpath(*name.split("."))
            if not (target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, missing


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_functions_take_few_parameters(name):
    fn = inspect.unwrap(cli.get_command(click.Context(cli), name).callback)
    assert len(inspect.signature(fn).parameters) <= MAX_PARAMETERS, (name, list(inspect.signature(fn).parameters))


def test_command_modules_are_short():
    long = {p.name: n for p in (PACKAGE / "cli").glob("*_cmd.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_COMMAND_LINES}
    assert not long, long


def test_answers_take_few_parameters():
    """Each answers module's public functions take option groups, not long keyword lists."""
    wide = []
    for path in sorted((PACKAGE / "answers").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if n > MAX_PARAMETERS:
                    wide.append(f"{path.name}:{node.name} ({n})")
    assert not wide, wide


def test_each_command_has_its_answer():
    """One answers module per command, named after it, holding a function of the same name."""
    answers = {p.stem for p in (PACKAGE / "answers").glob("*.py")}
    for name in COMMANDS:
        module = name.replace("-", "_")
        assert module in answers, f"no dlsched/answers/{module}.py for dlsched {name}"
        tree = ast.parse((PACKAGE / "answers" / f"{module}.py").read_text(encoding="utf-8"))
        assert module in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, module


def test_hooks_hold_only_what_a_training_script_imports():
    assert {p.name for p in (PACKAGE / "hooks").glob("*.py")} <= HOOKS
