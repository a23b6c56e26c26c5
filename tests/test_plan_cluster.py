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
