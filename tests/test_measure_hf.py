"""`plan-batch --measure` on Hugging Face models (issue: numbers a user can trust, item 5): their output is a
ModelOutput, not a tensor; the training loss reads any output structure (dlsched.factory.training_loss)."""
from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_measure_runs_hugging_face_models(name):
    proc = run_cli("plan-batch", f"examples/hf_models.py:{name}", "--memory", "2GiB", "--measure",
                   "--measure-batches", "2,4", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["estimate"] == "measured" and out["batch"] >= 4
    assert [p["batch"] for p in out["memory"]["details"]["points"]] == [2, 4]
