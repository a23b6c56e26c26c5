"""LB-BSP in the real parameter-server hook (issue 13, DESIGN §5.1): per-worker batches decided by server 0,
weighted gradients (paper 002_* Alg. 3), and workers whose CPU is taken away with cgroup quotas.

The speed targets (BSP/LB-BSP ratio, recovery after a quota swap) are measured by
benchmarks/bench_lbbsp_real.py, not here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.errors import DlschedError
from dlsched.jobs.policy_run import check_quotas, quota_prediction
from dlsched.jobs.throttled_run import parse_changes
from dlsched.runtime.batch_manager import gradient_weight, slices
from dlsched.runtime.cgroups import CPU_ROOT, CgroupError, CpuCgroup, cpu_share, unavailable
from tests.conftest import assert_clean_error, run_cli

MODEL = "examples/torch_models.py:small_cnn"
NO_CGROUPS = unavailable()


# --- the algebra -------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(lambda s: sum(s) > 0), st.data())
def test_weighted_means_are_the_global_mean(sizes, data):
    """(1/n)·Σ (n·b_i/X)·mean_i = mean of all X samples, whatever the split (paper eq. 7)."""
    x = sum(sizes)
    values = data.draw(st.lists(st.floats(-1e3, 1e3), min_size=x, max_size=x))
    n = len(sizes)
    total = 0.0
    for off, b in slices(sizes):
        if b:
            total += gradient_weight(b, x, n) * sum(values[off:off + b]) / b
    assert total / n == pytest.approx(sum(values) / x, rel=1e-9, abs=1e-9)
    assert [o for o, _ in slices(sizes)] == [sum(sizes[:i]) for i in range(n)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.05, 2.0), min_size=2, max_size=6), st.lists(st.tuples(st.integers(1, 500),
                                                                                   st.data()), max_size=3))
def test_quota_swaps_permute_the_shares(shares, swaps):
    specs = []
    for it, data in swaps:
        i = data.draw(st.integers(0, len(shares) - 1))
        j = data.draw(st.integers(0, len(shares) - 1).filter(lambda v: v != i))
        specs.append(f"{it}:{i},{j}")
    for change in parse_changes(specs, shares):
        assert sorted(change.shares) == sorted(shares)


def test_quota_prediction_of_the_acceptance_setting():
    assert quota_prediction(64, [0.5, 0.25, 0.125, 0.125]) == {"split": [32, 16, 8, 8], "bsp_over_lbbsp": 2.0}


@pytest.mark.parametrize("quotas, swaps, needle", [
    ([0.5, 0.25], [], "2 CPU quotas for 4 workers"),
    ([0.5, 0.25, 0.0, 0.1], [], "above 0"),
    (None, ["10:0,1"], "--cpu-quota"),
])
def test_bad_quotas_are_refused(quotas, swaps, needle):
    with pytest.raises(DlschedError, match=needle):
        check_quotas(quotas, swaps, 4)


@pytest.mark.parametrize("spec", ["10", "x:0,1", "10:0,0", "10:0,9", "0:0,1"])
def test_bad_swaps_are_refused(spec):
    with pytest.raises(DlschedError, match="swap"):
        parse_changes([spec], [0.5, 0.25, 0.125, 0.125])


# --- cgroups -----------------------------------------------------------------------------------------------

def test_unavailable_says_why(tmp_path):
    assert "no cgroup v1 cpu controller" in unavailable(tmp_path)
    with pytest.raises(CgroupError, match="no cgroup v1 cpu controller"):
        CpuCgroup(0.5, root=tmp_path)


@pytest.mark.skipif(NO_CGROUPS is not None, reason=f"cgroups unavailable: {NO_CGROUPS}")
def test_cgroup_quota_is_read_back_changed_and_removed():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(RuntimeError):
            with CpuCgroup(0.25) as cg:
                path = cg.path
                cg.add(sleeper.pid)
                assert cg.pids() == [sleeper.pid]
                assert cpu_share(sleeper.pid) == pytest.approx(0.25)
                cg.set_share(0.125)
                assert cpu_share(sleeper.pid) == pytest.approx(0.125)
                with pytest.raises(CgroupError, match="above 0"):
                    cg.set_share(0)
                with pytest.raises(CgroupError, match="smallest quota"):
                    cg.set_share(0.01)
                raise RuntimeError("removed even on error")
        assert not path.exists()
        assert cpu_share(sleeper.pid) > 0.25  # back in the parent, unlimited
    finally:
        sleeper.kill()
        sleeper.wait()


# --- real runs ---------------------------------------------------------------------------------------------

def _launch(**kw):
    from dlsched.hooks.torch_ps import PSConfig, launch_local, order_from_module
    cfg = PSConfig(model=MODEL, order=order_from_module(MODEL), **kw)
    return cfg, launch_local(cfg)


def test_unequal_changing_batches_train_like_one_process():
    """Acceptance 2: 10 SGD steps with unequal, changing batches (lbbsp-gpu moving 1 sample every
    iteration) reach the parameters of single-process SGD on the same global batches to 1e-6; the
    naive 1/W average of the same job does not (> 1e-3 on some tensor)."""
    from dlsched.hooks.torch_ps import reference_train
    kw = dict(servers=2, workers=2, iterations=10, batch=2, global_batch=4, batch_policy="lbbsp-gpu",
              policy_options={"delta": 1, "window": 1}, lr=0.1, timeout=30)
    cfg, run = _launch(**kw)
    sizes = [tuple(e["sizes"]) for e in run.batches["batches"]]
    assert len(set(sizes)) >= 2 and any(a != b for a, b in sizes), sizes  # unequal and changing
    ref = reference_train(cfg)
    assert max(float((run.params[n] - ref[n]).abs().max()) for n in ref) < 1e-6

    cfg, naive = _launch(aggregation="mean", **kw)
    assert any(a != b for a, b in (e["sizes"] for e in naive.batches["batches"]))
    assert max(float((naive.params[n] - ref[n]).abs().max()) for n in ref) > 1e-3


@pytest.mark.skipif(NO_CGROUPS is not None, reason=f"cgroups unavailable: {NO_CGROUPS}")
def test_throttled_worker_gets_a_smaller_batch_and_cgroups_go():
    """A worker limited to 1/8 of a core by its cgroup ends with a much smaller batch under lbbsp-cpu,
    reports its quota, and no cgroup of ours is left afterwards."""
    from dlsched.jobs.policy_run import train_with_policy
    out = train_with_policy(MODEL, workers=2, global_batch=16, policy="lbbsp-cpu", predictor="memoryless",
                            quotas=[1.0, 0.125], iterations=12, timeout=30)
    last = out["history"][-1]
    assert last["cpu"] == pytest.approx([1.0, 0.125])
    assert last["sizes"][1] <= 5 < last["sizes"][0], [e["sizes"] for e in out["history"]]
    assert sum(last["sizes"]) == 16
    assert not [d for d in os.listdir(CPU_ROOT) if d.startswith(f"dlsched-w0-{os.getpid()}-")]


# --- the CLI -----------------------------------------------------------------------------------------------

@pytest.mark.skipif(NO_CGROUPS is not None, reason=f"cgroups unavailable: {NO_CGROUPS}")
def test_cli_train_ps_json_and_plot(tmp_path):
    png = tmp_path / "batches.png"
    t = time.monotonic()
    proc = run_cli("train-ps", MODEL, "--workers", "2", "--global-batch", "8", "--batch-policy", "lbbsp-cpu",
                   "--cpu-quota", "1,0.25", "--swap-at", "4:0,1", "--iterations", "8", "--plot", png, "--json",
                   timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["history"]) == 8 and all(sum(e["sizes"]) == 8 for e in out["history"])
    assert [a[1] for a in out["applied"]] == [[1.0, 0.25], [0.25, 1.0]]
    assert out["history"][-1]["cpu"] == pytest.approx([0.25, 1.0])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert time.monotonic() - t < 60


@pytest.mark.parametrize("args, needle", [
    (["--batch-policy", "nonsense"], "nonsense"),
    (["--cpu-quota", "0.5,0.5,0.5"], "3 CPU quotas for 2 workers"),
    (["--cpu-quota", "0.5,-1"], "above 0"),
    (["--cpu-quota", "half,1"], "--cpu-quota"),
    (["--batch-policy", "bsp", "--global-batch", "1"], "bsp"),
])
def test_cli_bad_input_exits_2(args, needle, tmp_path):
    png = tmp_path / "p.png"
    proc = run_cli("train-ps", MODEL, "--workers", "2", "--iterations", "2", "--plot", png, *args, timeout=60)
    assert_clean_error(proc, needle)
    assert not png.exists()
