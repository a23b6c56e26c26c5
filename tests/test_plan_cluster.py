"""Cluster sizing (paper 003 Lemmas 3.1, 3.2), as functions and through ``dlsched plan-cluster --json``."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.errors import DlschedError
from dlsched.planning.cluster import (devices_needed, parallel_speedup, parameter_servers, scaling_efficiency,
                                      scaling_table, speedup_limit)
from tests.conftest import assert_clean_error, run_cli


def _json(*args):
    proc = run_cli("plan-cluster", *args, "--json", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_paper_example_four_devices_for_3x():
    # paper 003 §3.2: R_O = 10 %, 3× speedup → a 4-GPU system
    out = _json("--overhead-ratio", "0.1", "--target-speedup", "3")
    assert out["devices"] == 4
    row = {r["devices"]: r for r in out["table"]}
    assert row[4]["speedup"] == pytest.approx(4 * 1.1 / 1.4)
    assert row[3]["speedup"] < 3 <= row[4]["speedup"]
    assert row[4]["efficiency"] == pytest.approx(1.1 / 1.4)


def test_unreachable_target():
    out = _json("--overhead-ratio", "0.1", "--target-speedup", "12")
    assert out["devices"] is None and out["reachable"] is False
    assert out["speedup_limit"] == pytest.approx(11)
    proc = run_cli("plan-cluster", "--overhead-ratio", "0.1", "--target-speedup", "12")
    assert proc.returncode == 0
    assert "unreachable" in proc.stdout and "1 + 1/R_O = 11" in proc.stdout


def test_parameter_servers_alexnet_example():
    # 180 MB = 1.44 Gbit of parameters, 4 workers, 10 Gbps, 0.5 s of compute:
    # 2·1.44·4 / (10·0.5) = 2.304 → 3 servers
    out = _json("--overhead-ratio", "0.1", "--param-bytes", "180MB", "--workers", "4",
                "--bandwidth", "10Gbps", "--compute-time", "0.5s")
    assert out["parameter_servers"] == 3
    assert "devices" not in out
    assert parameter_servers(180e6, 4, 10e9 / 8, 0.5) == 3
    assert parameter_servers(180e6, 4, 10e9 / 8, 0.576) == 2  # exactly 2.0 needs 2, not 3


def test_parameter_servers_need_all_inputs():
    proc = run_cli("plan-cluster", "--overhead-ratio", "0.1", "--workers", "4", "--json")
    assert_clean_error(proc, "--param-bytes", "--bandwidth", "--compute-time")
    proc = run_cli("plan-cluster", "--overhead-ratio", "-1")
    assert_clean_error(proc, "overhead-ratio")
    proc = run_cli("plan-cluster", "--overhead-ratio", "0.1", "--param-bytes", "1MB", "--workers", "2",
                   "--bandwidth", "fast", "--compute-time", "1s")
    assert_clean_error(proc, "bandwidth")


def test_zero_overhead_scales_linearly():
    assert devices_needed(0, 7.5) == 8
    assert speedup_limit(0) == math.inf
    assert scaling_efficiency(0, 100) == 1
    t = scaling_table(0.05, 5)
    assert list(t["devices"]) == [1, 2, 3, 4, 5] and t["speedup"].is_monotonic_increasing


@settings(max_examples=300, deadline=None)
@given(st.floats(0.001, 2.0), st.floats(1.0, 50.0))
def test_devices_needed_is_smallest(ratio, target):
    g = devices_needed(ratio, target)
    if target >= 1 + 1 / ratio:
        assert g is None
        return
    assert g is not None and parallel_speedup(ratio, g) >= target * (1 - 1e-9)
    if g > 1:
        assert parallel_speedup(ratio, g - 1) < target


def test_bad_target():
    with pytest.raises(DlschedError):
        devices_needed(0.1, -2)


# -- Lemma 3.1 inverted, and inputs read off a model (issue: cluster sizing from the model) --

@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=2, max_value=10_000), st.floats(min_value=0.0, max_value=1.0))
def test_inverse_lemma_gives_back_the_efficiency(devices, t):
    from dlsched.planning.cluster import max_overhead_ratio
    alpha = 1 / devices + t * (1 - 1 / devices)  # α in [1/G, 1]: the efficiencies G devices can have
    R = max_overhead_ratio(devices, alpha)
    if alpha * devices <= 1 or R == math.inf:  # at (or within rounding of) 1/G every ratio keeps α
        assert R == math.inf and alpha * devices - 1 < 1e-300
        return
    assert scaling_efficiency(R, devices) == pytest.approx(alpha, rel=1e-9, abs=1e-12)
    if 0 < R < 1e6:  # any larger ratio misses the target (far out, α is within rounding of 1/G)
        assert scaling_efficiency(R * 1.01, devices) < alpha


def test_inverse_lemma_paper_example_and_amdahl():
    from dlsched.planning.cluster import max_overhead_ratio
    assert max_overhead_ratio(4, 0.8) == pytest.approx(0.2 / 2.2)  # 4 GPUs at 80 %: R_O ≤ 9.09 %
    assert speedup_limit(1.0) == 2  # Amdahl: half the time is overhead, so never more than 2×
    proc = run_cli("plan-cluster", "--devices", "4", "--target-efficiency", "0.8", timeout=120)
    assert proc.returncode == 0 and "R_O = 0.0909" in proc.stdout, proc.stdout + proc.stderr
    assert _json("--devices", "4", "--target-efficiency", "80%")["inverse"]["overhead_ratio"] == pytest.approx(
        0.0909, abs=1e-4)
    assert_clean_error(run_cli("plan-cluster", "--devices", "4"), "--target-efficiency")


@pytest.fixture(scope="module")
def resnet_files(tmp_path_factory):
    """The demo's ResNet-50 training DAG (batch 8, 2 servers) and an analytic oracle for it."""
    d = tmp_path_factory.mktemp("resnet")
    dag, oracle = d / "resnet50.train.dag.json", d / "oracle.csv"
    for args in (("inspect", "examples/torch_models.py:resnet50", "--mode", "training", "--batch", "8", "--ps", "2",
                  "--save", str(dag)),
                 ("profile", str(dag), "--analytic", "-o", str(oracle))):
        proc = run_cli(*args, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return str(dag), str(oracle)


def test_inputs_from_the_model(resnet_files):
    dag, oracle = resnet_files
    out = _json(dag, "--oracle", oracle)
    bounds = json.loads(run_cli("bounds", dag, "--oracle", oracle, "--json").stdout)
    assert out["param_bytes"] == 102_228_128  # the sum of the recv bytes
    assert out["compute_time"] == pytest.approx(bounds["loads"]["compute:0"], rel=1e-12)
    assert out["makespan"] >= out["compute_time"]
    assert out["overhead_ratio"] == pytest.approx((out["makespan"] - out["compute_time"]) / out["compute_time"])
    assert set(out["sources"]) >= {"param_bytes", "compute_time", "overhead_ratio", "makespan"}
    assert "TAC" in out["sources"]["makespan"]
    assert out["table"][0]["devices"] == 1  # the model's R_O answers Lemma 3.1
    # a figure given by hand wins, and says so
    given = _json(dag, "--oracle", oracle, "--overhead-ratio", "0.5")
    assert given["table"][1]["efficiency"] == pytest.approx(1.5 / 2) and "given" in given["sources"]["overhead_ratio"]
    # Lemma 3.2 from the model: S_p and T_C filled in
    ps = _json(dag, "--oracle", oracle, "--workers", "8", "--bandwidth", "1Gbps")
    assert ps["parameter_server_inputs"]["param_bytes"] == 102_228_128
    assert ps["parameter_servers"] == parameter_servers(102_228_128, 8, 1e9 / 8, out["compute_time"])
    assert ps["parameter_server_assumptions"]


def test_uneven_servers_are_named_with_the_greedy_alternative(resnet_files):
    dag, oracle = resnet_files
    out = _json(dag, "--oracle", oracle, "--ps", "3")["server_balance"]
    assert out["strategy"] == "round-robin" and out["uneven"] and out["most_loaded"] == 0
    assert out["bytes_per_server"][0] > 0.99 * sum(out["bytes_per_server"])  # every conv weight on server 0
    assert out["greedy_imbalance"] < 1.01
    text = run_cli("plan-cluster", dag, "--oracle", oracle, "--ps", "3").stdout
    assert "server 0 carries" in text and "--ps-strategy greedy" in text
    even = _json(dag, "--oracle", oracle, "--ps", "3", "--ps-strategy", "greedy")["server_balance"]
    assert not even["uneven"]
    assert_clean_error(run_cli("plan-cluster", dag), "--oracle")
