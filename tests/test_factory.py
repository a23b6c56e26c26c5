"""The one factory loader (dlsched/factory.py): guarded user code (issue 16 items 1 and 9).

A factory is the user's code: ``sys.exit`` inside it must not pass for success,
and its prints must not corrupt ``--json`` output.
"""
from __future__ import annotations

import json
import textwrap

import pytest

from dlsched.errors import ImportFailure
from dlsched.factory import call_factory, load_factory, training_loss
from tests.conftest import EXAMPLES, assert_clean_error, run_cli

NET = """
import torch
def net():
    {body}
    return torch.nn.Linear(4, 2), torch.randn(3, 4)
"""


def _factory(tmp_path, body: str, prelude: str = "") -> str:
    f = tmp_path / "f.py"
    f.write_text(prelude + textwrap.dedent(NET).format(body=body))
    return f"{f}:net"


@pytest.mark.parametrize("code", [0, 4])
def test_factory_that_exits_fails_check_and_writes_nothing(tmp_path, code):
    base = tmp_path / "b.json"
    assert run_cli("snapshot", f"{EXAMPLES / 'torch_models.py'}:small_cnn", "--batch", "2", "-o", base).returncode == 0
    spec = _factory(tmp_path, f"import sys; sys.exit({code})")
    junit = tmp_path / "j.xml"
    assert_clean_error(run_cli("check", spec, "--baseline", base, "--junit", junit), "sys.exit", "f.py:net")
    assert not junit.exists()
    out = tmp_path / "s.json"
    assert_clean_error(run_cli("snapshot", spec, "-o", out), "sys.exit")
    assert not out.exists()


def test_exit_at_import_names_the_file(tmp_path):
    spec = _factory(tmp_path, "pass", prelude="import sys\nsys.exit(4)\n")
    assert_clean_error(run_cli("inspect", spec), "sys.exit(4)", "executing")


def test_prints_go_to_stderr_so_json_parses(tmp_path):
    spec = _factory(tmp_path, "print('building the net...')", prelude="print('importing f')\n")
    proc = run_cli("inspect", spec, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["param_count"] == 4 * 2 + 2
    assert "building the net..." in proc.stderr and "importing f" in proc.stderr


def test_library_calls_are_guarded_too(tmp_path):
    with pytest.raises(ImportFailure, match="sys.exit"):
        call_factory(_factory(tmp_path, "raise SystemExit('bye')"))
    with pytest.raises(ImportFailure, match="no such file"):
        load_factory(str(tmp_path / "missing.py") + ":net")
    with pytest.raises(ImportFailure, match="not found"):
        load_factory("no_such_package_xyz.models:net")


def test_batch_is_resized_by_cycling_rows(tmp_path):
    import torch

    _, (x,), name = call_factory(_factory(tmp_path, "pass"), batch=7)
    assert name == "net" and x.shape == (7, 4)
    assert torch.equal(x[3], x[0]) and torch.equal(x[6], x[0])


def test_training_loss_reads_any_output_structure():
    import torch

    logits = torch.randn(4, 3)
    assert training_loss(logits).item() == pytest.approx(
        torch.nn.functional.cross_entropy(logits, torch.zeros(4, dtype=torch.long)).item())
    nested = {"a": torch.ones(2, 2), "b": (torch.full((3,), 2.0), torch.arange(3))}
    assert training_loss(nested).item() == pytest.approx(1.0 + 4.0)
    with pytest.raises(TypeError):
        training_loss((torch.arange(3),))


@pytest.mark.parametrize("body", ["import os; os._exit(0)", "class Stop(BaseException): pass\n    raise Stop('halt')"])
def test_factory_that_hard_exits_or_raises_a_base_exception_fails_check(tmp_path, body):
    """``os._exit(0)`` and a ``BaseException`` subclass in the factory (issue 32, item 6): inspect, check and
    snapshot exit 2 naming the factory and write nothing; before, os._exit(0) passed the CI gate unchecked."""
    base = tmp_path / "b.json"
    assert run_cli("snapshot", f"{EXAMPLES / 'torch_models.py'}:small_cnn", "--batch", "2", "-o", base).returncode == 0
    spec = _factory(tmp_path, body)
    what = "os._exit(0)" if "_exit" in body else "Stop: halt"
    assert_clean_error(run_cli("inspect", spec), what, "f.py:net")
    junit = tmp_path / "j.xml"
    assert_clean_error(run_cli("check", spec, "--baseline", base, "--junit", junit), what, "f.py:net")
    assert not junit.exists()
    out = tmp_path / "s.json"
    assert_clean_error(run_cli("snapshot", spec, "-o", out), what, "f.py:net")
    assert not out.exists()
