"""``plan-batch --algorithms``: the batch with the most samples/s (paper 003 §3.1, Fig. 2), through the CLI."""
from __future__ import annotations

import json

import pandas as pd

from tests.conftest import assert_clean_error, run_cli

ALEXNET = ("examples/torch_models.py:alexnet", "--memory", "12GiB", "--algorithms", "examples/alexnet_algorithms.csv")


def test_fastest_batch_lies_below_the_largest_that_fits():
    proc = run_cli("plan-batch", *ALEXNET, "--classes", "100", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert 100 <= out["batch"] < out["largest_feasible"]
    curve = pd.DataFrame(out["curve"])
    feasible = curve[curve.feasible]
    best = feasible.samples_per_s.idxmax()
    assert feasible.batch[best] == out["batch"]
    # Fig. 2's shape: rises to the best batch, drops right after it, where conv1's FFT gives way
    before, after = feasible.loc[:best], feasible.loc[best:]
    assert before.samples_per_s.is_monotonic_increasing and after.samples_per_s.iloc[1] < out["samples_per_s"]
    assert after.algorithms.iloc[0][0] == "fft" and after.algorithms.iloc[1][0] == "gemm"
    assert (curve.batch[~curve.feasible & (curve.batch < 100)]).size > 0  # below the classes: refused
    text = run_cli("plan-batch", *ALEXNET, "--classes", "100", "--batch-range", "96:256", timeout=600).stdout
    assert f"fastest batch {out['batch']}" in text and "trade-off in: conv1, conv2" in text


def test_no_tradeoff_is_said(tmp_path):
    """On CPUs one algorithm is usually both fastest and leanest: then memory only decides what fits."""
    rows = [(layer, algo, b, t * b, w * b) for b in (8, 16, 32) for layer in ("conv1", "conv2")
            for algo, t, w in (("direct", 0.001, 10), ("gemm", 0.002, 1000))]
    table = tmp_path / "cpu.csv"
    pd.DataFrame(rows, columns=["layer", "algorithm", "batch", "time_s", "workspace_bytes"]).to_csv(table, index=False)
    proc = run_cli("plan-batch", "examples/torch_models.py:small_cnn", "--memory", "1GiB", "--algorithms", table,
                   "--classes", "10", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "no trade-off" in proc.stdout and "oneDNN" in proc.stdout


def test_bad_requests_are_refused(tmp_path):
    assert_clean_error(run_cli("plan-batch", *ALEXNET), "--classes")
    assert_clean_error(run_cli("plan-batch", *ALEXNET, "--classes", "10", "--batch-range", "16-64"), "LO:HI")
    assert_clean_error(run_cli("plan-batch", *ALEXNET, "--classes", "5000"), "classes")
    bad = tmp_path / "bad.csv"
    bad.write_text("layer,algorithm\nconv1,fft\n")
    assert_clean_error(run_cli("plan-batch", "examples/torch_models.py:small_cnn", "--memory", "1GiB",
                               "--algorithms", bad, "--classes", "10"), str(bad))
