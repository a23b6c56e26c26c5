"""``dlsched plan-ddp`` as a user runs it: profile a model, plan DDP, write the ordered all-reduce's schedule."""
from __future__ import annotations

import json

import pytest

from dlsched.analyses.allreduce_order import Piece
from dlsched.analyses.ddp_step import check_cover
from dlsched.formats.allreduce_order_file import read_order_file
from tests.conftest import assert_clean_error, run_cli

MODEL = "examples/torch_models.py:small_cnn"


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan_ddp") / "oracle.csv"
    proc = run_cli("profile", MODEL, "--mode", "training", "--analytic", "-o", path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


def _plan(oracle, *args):
    proc = run_cli("plan-ddp", MODEL, "--oracle", oracle, *args, "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_json_plan(oracle):
    out = _plan(oracle, "--workers", "4", "--bandwidth", "1Gbps", "--latency", "50us", "--caps", "1,2,4,8")
    assert out["network"] == "given" and out["workers"] == 4
    assert [c["bucket_cap_mb"] for c in out["caps"]] == [None, 1.0, 2.0, 4.0, 8.0]
    fastest = min(c["step_s"] for c in out["caps"])
    rec = out["recommended"]
    assert rec["step_s"] <= fastest * 1.01
    assert out["ddp_kwargs"] == {"bucket_cap_mb": rec["bucket_cap_mb"], "gradient_as_bucket_view": True}
    assert out["bound"] in ("compute-bound", "latency-bound", "bandwidth-bound") and out["why"]
    for c in out["caps"] + out["ordered"]:
        assert c["L_s"] - 1e-12 <= c["step_s"] <= c["U_s"] + 1e-12
        assert 0 <= c["E"] <= 1
    assert out["gradient_as_bucket_view_false_step_s"] >= rec["step_s"]
    best = out["ordered_best"]
    assert best["step_s"] == min(o["step_s"] for o in out["ordered"])
    assert out["ordered_gain"] == pytest.approx(rec["step_s"] / best["step_s"])
    assert out["S"] == pytest.approx((rec["U_s"] - rec["L_s"]) / rec["L_s"])
    assert ("pays" in out["verdict"]) and out["ordered_pays"] == (out["ordered_gain"] >= 1.01)


def test_slow_link_is_bandwidth_bound_and_fast_one_compute_bound(oracle):
    slow = _plan(oracle, "--workers", "8", "--bandwidth", "100Mbps", "--latency", "10us")
    assert slow["bound"] == "bandwidth-bound"
    fast = _plan(oracle, "--workers", "2", "--bandwidth", "1000Gbps", "--latency", "0us")
    assert fast["bound"] == "compute-bound"
    chatty = _plan(oracle, "--workers", "16", "--bandwidth", "1000Gbps", "--latency", "5ms", "--caps", "1")
    assert chatty["bound"] == "latency-bound"


def test_text_and_order_file_cover_every_parameter(oracle, tmp_path):
    order = tmp_path / "order.json"
    proc = run_cli("plan-ddp", MODEL, "--oracle", oracle, "--workers", "4", "--piece-bytes", "64KiB,1MiB",
                   "--write-order", order, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for needle in ("bucket_cap_mb", "recommended", "DistributedDataParallel(model,", "ordered all-reduce", "S ="):
        assert needle in proc.stdout, proc.stdout
    f = read_order_file(order)
    assert f.world == 4 and f.piece_bytes in (64 * 1024, 1024**2) and f.model_name == "small_cnn"
    from examples.torch_models import small_cnn

    module, _ = small_cnn()
    elements = {name: p.numel() for name, p in module.named_parameters() if p.requires_grad}
    check_cover([Piece(p.slices, p.bytes, p.priority) for p in f.pieces], elements)
    assert all(p.bytes <= f.piece_bytes for p in f.pieces)


@pytest.mark.parametrize("args, needles", [
    (("--workers", "1"), ("--workers",)),
    (("--workers", "4", "--caps", "0"), ("positive",)),
    (("--workers", "4", "--caps", "x"), ("--caps",)),
    (("--workers", "4", "--piece-bytes", "0"), ("piece",)),
    (("--workers", "4", "--piece-bytes", "1"), ("--piece-bytes", "--max-work")),
    (("--workers", "4", "--mode", "inference"), ("inference",)),
    (("--workers", "4", "--measure-network", "--bandwidth", "1Gbps"), ("--measure-network", "--bandwidth")),
])
def test_hostile_inputs_exit_2(oracle, args, needles):
    proc = run_cli("plan-ddp", MODEL, "--oracle", oracle, *args, timeout=600)
    assert_clean_error(proc, *needles)


def test_oracle_missing_ops_is_refused(oracle, tmp_path):
    lines = oracle.read_text().splitlines()
    short = tmp_path / "short.csv"
    short.write_text("\n".join(lines[:3]) + "\n")
    proc = run_cli("plan-ddp", MODEL, "--oracle", short, "--workers", "4", timeout=600)
    assert_clean_error(proc, "miss")
    proc = run_cli("plan-ddp", MODEL, "--oracle", oracle, "--workers", "4", "--write-order", tmp_path, timeout=600)
    assert_clean_error(proc, "--write-order")
