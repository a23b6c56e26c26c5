"""``dlsched plan-fsdp`` as a user runs it: profile a model, plan FSDP2 under a memory budget, write the plan and
apply it in a real 2-process job (the FSDP2 job itself: tests/test_torchrun.py)."""
from __future__ import annotations

import json

import pytest

from dlsched.formats.fsdp_plan_file import read_fsdp_plan
from tests.conftest import assert_clean_error, run_cli

MODEL = "examples/torch_models.py:transformer"
TOY = "examples/torchrun/toy.py:toy_model"


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan_fsdp") / "oracle.csv"
    proc = run_cli("profile", MODEL, "--mode", "training", "--batch", "4", "--analytic", "-o", path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


@pytest.fixture(scope="module")
def free(oracle):
    """The plan with no budget, on the 100 Mbit/s link the budget tests use."""
    return _plan(oracle, "--workers", "2", "--bandwidth", "100Mbps")


def _plan(oracle, *args, model=MODEL):
    proc = run_cli("plan-fsdp", model, "--batch", "4", "--oracle", oracle, *args, "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_a_slow_link_plan_prefetches_async_and_beats_the_default(oracle, tmp_path):
    out = _plan(oracle, "--workers", "2", "--bandwidth", "100Mbps", "--latency", "100us", "--write-plan",
                tmp_path / "plan.json")
    plan, default = out["plan"], out["default"]
    assert default["label"].endswith("FSDP2 default (blocking all-gathers)") and not default["unshard_async"]
    assert default["step_s"] == pytest.approx(default["U_s"])  # on CPU the default serialises everything
    assert plan["unshard_async"] and plan["step_s"] < default["step_s"]
    assert out["gain"] == pytest.approx(default["step_s"] / plan["step_s"]) and "x)" in out["verdict"]
    for c in (plan, default):
        assert c["L_s"] - 1e-12 <= c["step_s"] <= c["U_s"] + 1e-12 and c["peak_bytes"] > 0
    written = read_fsdp_plan(tmp_path / "plan.json")
    assert [m for m, _ in written.units] == plan["units"] and written.unshard_async
    assert written.workers == 2 and written.predicted["gain"] == pytest.approx(out["gain"])


def test_a_budget_below_the_default_peak_is_kept_and_one_below_every_peak_refused(oracle, free):
    tight = free["default"]["peak_bytes"] - 1
    out = _plan(oracle, "--workers", "2", "--bandwidth", "100Mbps", "--memory", f"{int(tight)}B", "--margin", "0")
    assert out["plan"]["peak_bytes"] <= tight and out["smallest_peak_bytes"] <= tight
    proc = run_cli("plan-fsdp", MODEL, "--batch", "4", "--oracle", oracle, "--workers", "2", "--memory",
                   f"{int(out['smallest_peak_bytes']) - 1}B", "--margin", "0")
    assert_clean_error(proc, "no FSDP schedule of", "the smallest predicted peak is")


def test_the_plan_leaves_its_margin_of_the_budget_free(oracle, free):
    """10% by default, as plan-batch: a real peak moved by up to 11% from run to run (docs/plan-fsdp.md)."""
    budget = free["plan"]["peak_bytes"] * 1.05  # fits the fastest plan, but not with 10% free
    out = _plan(oracle, "--workers", "2", "--bandwidth", "100Mbps", "--memory", f"{int(budget)}B")
    assert out["memory_margin"] == 0.1 and out["plan"]["peak_bytes"] <= 0.9 * budget < free["plan"]["peak_bytes"]
    proc = run_cli("plan-fsdp", MODEL, "--batch", "4", "--oracle", oracle, "--workers", "2", "--memory",
                   f"{int(out['smallest_peak_bytes'])}B")
    assert_clean_error(proc, "less 10% headroom", "a smaller --margin")


def test_text_output_names_the_units(oracle):
    proc = run_cli("plan-fsdp", MODEL, "--batch", "4", "--oracle", oracle, "--workers", "4", "--units",
                   "layers.0,layers.1,layers.2,layers.3", "--bandwidth", "1Gbps")
    assert proc.returncode == 0, proc.stderr
    assert "units (forward order): layers.0, layers.1, layers.2, layers.3" in proc.stdout
    assert "FSDP2 step, one process" in proc.stdout


@pytest.mark.parametrize("args, needles", [
    (["--units", "layers.9"], ["unit 'layers.9' owns no parameter"]),
    (["--units", "layers.0,,layers.1"], ["--units takes module paths"]),
    (["--memory", "-5GiB"], ["--memory"]),
    (["--workers", "1"], ["--workers"]),
    (["--measure-network", "--bandwidth", "1Gbps"], ["--measure-network", "--bandwidth"]),
    (["--memory", "1GiB", "--margin", "100%"], ["--margin", "a fraction in [0, 1)"]),
], ids=["no-such-module", "empty-unit", "negative-budget", "one-worker", "measure-and-given", "whole-margin"])
def test_hostile_inputs_exit_2(oracle, args, needles):
    base = ["plan-fsdp", MODEL, "--batch", "4", "--oracle", oracle]
    if "--workers" not in args:
        base += ["--workers", "2"]
    assert_clean_error(run_cli(*base, *args), *needles)


def test_the_plans_fingerprint_is_the_modules(tmp_path):
    """The fingerprint plan-fsdp writes from the DAG's parameters is the one apply_plan computes from the module."""
    from dlsched.hooks.fsdp import module_fingerprint
    from tests.test_torchrun import _toy
    oracle = tmp_path / "toy.csv"
    proc = run_cli("profile", TOY, "--mode", "training", "--analytic", "-o", oracle, timeout=600)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("plan-fsdp", TOY, "--oracle", oracle, "--workers", "2", "--bandwidth", "1Gbps",
                   "--write-plan", tmp_path / "plan.json", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert read_fsdp_plan(tmp_path / "plan.json").fingerprint == module_fingerprint(_toy().toy_model()[0])


@pytest.mark.parametrize("text, needle", [
    ("{not json", "not JSON"),
    ('{"format": "dlsched-allreduce-order", "version": 1}', "not an FSDP plan"),
    ('{"format": "dlsched-fsdp-plan", "version": 7}', "version 7"),
    ('{"format": "dlsched-fsdp-plan", "version": 1, "model": {"name": "m", "parameters": "x"}, "workers": 1, '
     '"units": [{"module": "", "reshard_after_forward": true}], "forward_prefetch": []}',
     "'workers' must be a whole number of processes ≥ 2"),
], ids=["corrupt", "another-format", "future-version", "bad-fields"])
def test_a_bad_plan_file_is_one_clear_error(tmp_path, text, needle):
    from dlsched.formats.fsdp_plan_file import FsdpPlanError
    (tmp_path / "plan.json").write_text(text)
    with pytest.raises(FsdpPlanError) as e:
        read_fsdp_plan(tmp_path / "plan.json")
    assert needle in str(e.value)
    if "bad-fields" in needle or "workers" in needle:
        assert "units[0]" in str(e.value) and "'forward_prefetch' must map" in str(e.value)
