"""The CI gate end to end: snapshot, check, JUnit, update, bad baselines.

Model variants are small torch factories written into tmp_path, each a real
architecture change a developer could make.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import assert_clean_error, run_cli

BASE = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, {k}, padding={k} // 2)
        self.pool = nn.MaxPool2d(2)
        self.relu = nn.ReLU()
        self.{fc1} = nn.Linear(32 * 8 * 8, {hidden})
        {extra_init}
        self.fc2 = nn.Linear({hidden}, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.relu(self.{fc1}(torch.flatten(x, 1)))
        {extra_fwd}
        return self.fc2(x)

def net(batch: int = 4):
    torch.manual_seed(0)
    return Net(), (torch.randn(batch, 3, 32, 32),)
"""

VARIANTS = {
    "base": dict(k=3, fc1="fc1", hidden=64, extra_init="", extra_fwd=""),
    "added_layer": dict(k=3, fc1="fc1", hidden=64, extra_init="self.fc_extra = nn.Linear(64, 64)",
                        extra_fwd="x = self.relu(self.fc_extra(x))"),
    "widened": dict(k=3, fc1="fc1", hidden=96, extra_init="", extra_fwd=""),
    "enlarged_param": dict(k=5,  # conv2 kernel 3x3 -> 5x5: +8,192 weights (+6%)
                            fc1="fc1", hidden=64, extra_init="", extra_fwd=""),
    "renamed": dict(k=3, fc1="dense1", hidden=64, extra_init="", extra_fwd=""),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("variants")
    out = {}
    for name, fields in VARIANTS.items():
        p = d / f"{name}.py"
        p.write_text(BASE.format(**fields))
        out[name] = f"{p}:net"
    return out


@pytest.fixture(scope="module")
def baseline(models, tmp_path_factory):
    path = tmp_path_factory.mktemp("baseline") / "base.json"
    proc = run_cli("snapshot", models["base"], "--mode", "training", "--memory", "512MiB", "-o", path)
    assert proc.returncode == 0, proc.stderr
    return path


def test_snapshot_records_everything_and_is_deterministic(models, baseline, tmp_path):
    doc = json.loads(baseline.read_text())
    m = doc["metrics"]
    for key in ("ops", "param_count", "param_bytes", "recv_ops", "send_ops", "upper_bound", "lower_bound",
                "speedup_bound", "tac_makespan", "tac_efficiency", "random_makespan", "random_efficiency",
                "largest_batch", "critical_path"):
        assert key in m, key
    assert m["param_count"] == 16 * 3 * 9 + 16 + 32 * 16 * 9 + 32 + 2048 * 64 + 64 + 64 * 10 + 10  # named_parameters()
    assert m["lower_bound"] <= m["tac_makespan"] <= m["upper_bound"]
    assert doc["model"]["fingerprint"] and doc["dlsched_version"]
    assert doc["op_types"]
    again = tmp_path / "again.json"
    assert run_cli("snapshot", models["base"], "--mode", "training", "--memory", "512MiB", "-o", again).returncode == 0
    assert again.read_bytes() == baseline.read_bytes()


def test_unchanged_model_passes_and_writes_junit(models, baseline, tmp_path):
    junit = tmp_path / "report.xml"
    proc = run_cli("check", models["base"], "--baseline", baseline, "--junit", junit)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no regression" in proc.stdout
    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    names = [c.get("name") for c in cases]
    assert len(names) == len(set(names)) == len(json.loads(baseline.read_text())["metrics"])
    assert not root.findall(".//failure")


@pytest.mark.parametrize("variant,moved", [
    ("added_layer", {"param_count", "ops"}),
    ("widened", {"param_count", "param_bytes"}),
    ("enlarged_param", {"param_count", "param_bytes"}),
])
def test_regressions_are_caught_and_named(models, baseline, tmp_path, variant, moved):
    junit = tmp_path / "report.xml"
    proc = run_cli("check", models[variant], "--baseline", baseline, "--junit", junit, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert moved <= set(out["regressed"]), out["regressed"]
    failed = {tc.get("name") for tc in ET.parse(junit).getroot().iter("testcase") if tc.find("failure") is not None}
    assert failed == set(out["regressed"])


def test_renamed_layer_changes_fingerprint_but_passes_with_a_note(models, baseline):
    proc = run_cli("check", models["renamed"], "--baseline", baseline)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fingerprint" in proc.stdout and "note" in proc.stdout


def test_tolerance_and_update(models, baseline, tmp_path):
    # A generous per-metric tolerance lets the widened model through only where it is given.
    proc = run_cli("check", models["widened"], "--baseline", baseline, "--tolerance", "90%", "--json")
    assert proc.returncode == 0, proc.stdout
    copy = tmp_path / "b.json"
    copy.write_bytes(baseline.read_bytes())
    assert run_cli("check", models["widened"], "--baseline", copy, "--update").returncode == 0
    assert run_cli("check", models["widened"], "--baseline", copy).returncode == 0


def test_bad_baselines_exit_2(models, tmp_path):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"format": "dlsched.baseline", "version": 1, "metrics": {')
    assert_clean_error(run_cli("check", models["base"], "--baseline", corrupt), "corrupt", str(corrupt))
    assert_clean_error(run_cli("check", models["base"], "--baseline", tmp_path / "missing.json"),
                       "no such baseline")
