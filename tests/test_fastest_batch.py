"""The batch with the most samples/s (paper 003 §3.1.3): Fig. 2's shape on the Table 2 AlexNet, refusals."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from dlsched.errors import DlschedError
from dlsched.planning.algorithm_choice import MAX, SUM
from dlsched.planning.fastest_batch import LinearMemory, fastest_batch
from dlsched.planning.memory import MemoryEstimate
from dlsched.planning.paper_alexnet import alexnet_algorithm_table, alexnet_memory_left

COLUMNS = ["layer", "algorithm", "batch", "time_s", "workspace_bytes"]


@pytest.fixture(scope="module")
def alexnet():
    return alexnet_algorithm_table()


@pytest.mark.parametrize("constraint", [SUM, MAX])
def test_alexnet_curve_has_the_shape_of_fig2(alexnet, constraint):
    """Samples/s rises with the batch, drops where conv1's FFT no longer fits, and the best batch is not the largest."""
    memory = alexnet_memory_left()
    result = fastest_batch(alexnet, memory, (16, 1024), num_classes=100, constraint=constraint)
    curve = result.curve[result.curve["feasible"]].reset_index(drop=True)
    at = curve.index[curve["batch"] == result.batch][0]
    rising = curve["samples_per_s"][:at + 1]
    assert len(rising) >= 3 and rising.is_monotonic_increasing and rising.is_unique
    assert result.algorithms["conv1"] == "fft"
    after = curve.loc[at + 1]
    assert after["algorithms"][0] == "gemm" and after["samples_per_s"] < result.samples_per_s
    # At the next batch the best batch's algorithms no longer fit and conv1 gives up its FFT. Under max
    # conv1's FFT alone is too big; under the paper's sum it no longer fits beside conv2's FFT, and
    # dropping conv1's FFT (the hungriest for the time it saves) is the cheapest way back under the bound.
    rows = alexnet[alexnet["batch"] == after["batch"]].set_index(["layer", "algorithm"])["workspace_bytes"]
    kept = [rows[pair] for pair in result.algorithms.items()]
    left = memory(int(after["batch"]))
    assert (sum(kept) if constraint == SUM else max(kept)) > left
    if constraint == MAX:
        assert rows["conv1", "fft"] > left
    assert curve["samples_per_s"][at + 1:].max() < result.samples_per_s
    assert result.batch < result.largest_feasible


def test_alexnet_tradeoff_lies_in_conv1_and_conv2(alexnet):
    result = fastest_batch(alexnet, alexnet_memory_left(), (16, 1024), num_classes=100)
    assert result.tradeoff_layers == ("conv1", "conv2") and not result.no_tradeoff
    assert (result.batch, result.largest_feasible) == (160, 560)
    assert list(result.algorithms) == ["conv1", "conv2", "conv3", "conv4", "conv5"]
    assert json.loads(json.dumps(result.to_dict()))["batch"] == 160


def test_batches_below_the_classes_are_shown_but_refused(alexnet):
    result = fastest_batch(alexnet, alexnet_memory_left(), (16, 1024), num_classes=100)
    below = result.curve[result.curve["batch"] < 100]
    assert not below["feasible"].any() and below["samples_per_s"].notna().all()
    assert set(below["reason"]) == {"fewer samples than the 100 classes"}


def test_imagenet_classes_leave_only_large_batches(alexnet):
    """1,000 classes: under max only 1008 and 1024 remain; under the paper's sum nothing fits in 12 GiB."""
    result = fastest_batch(alexnet, alexnet_memory_left(), (16, 1024), num_classes=1000, constraint=MAX)
    assert result.batch == result.largest_feasible == 1024
    with pytest.raises(DlschedError, match=r"no batch in 16:1024 with at least 1000 samples .* at batch 1008"):
        fastest_batch(alexnet, alexnet_memory_left(), (16, 1024), num_classes=1000)


def cpu_table():
    """Direct convolution is faster and leaner than GEMM at every batch (oneDNN on a CPU)."""
    rows = []
    for b in (8, 16, 32):
        for layer in ("conv1", "conv2"):
            rows.append((layer, "direct", b, 0.001 + 0.001 * b, 0.0))
            rows.append((layer, "gemm", b, 0.002 + 0.0015 * b, 1000.0 * b))
    return pd.DataFrame(rows, columns=COLUMNS)


def test_no_tradeoff_when_one_algorithm_dominates():
    result = fastest_batch(cpu_table(), LinearMemory(1e6, per_sample_bytes=100.0), (8, 32), num_classes=2)
    assert result.no_tradeoff and result.tradeoff_layers == ()
    assert not result.curve["tradeoff"].any()
    assert set(result.algorithms.values()) == {"direct"}


def test_equal_samples_per_s_choose_the_smaller_batch():
    rows = [("fc", "only", b, 0.01 * b, 0.0) for b in (4, 8, 16)]
    result = fastest_batch(pd.DataFrame(rows, columns=COLUMNS), lambda b: 1.0, (1, 16), num_classes=1)
    assert result.batch == 4


def test_memory_model_from_a_memory_estimate():
    est = MemoryEstimate("m", "static", "adam", param_bytes=100, activation_bytes_per_sample=10,
                         workspace_bytes_per_sample=2)
    memory = LinearMemory.from_estimate(est, capacity=2000, margin=0.1)
    assert memory(10) == 1800 - 400 - 120
    assert memory(10) == 2000 * 0.9 - est.total(10)


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_range": (16, 64), "num_classes": 100}, "every batch in 16:64 is below the number of classes"),
    ({"batch_range": (64, 16)}, "1 ≤ lo ≤ hi"),
    ({"batch_range": (0, 16)}, "1 ≤ lo ≤ hi"),
    ({"batch_range": (1.5, 16)}, "whole numbers"),
    ({"batch_range": 16}, "two whole numbers"),
    ({"num_classes": 0}, "number of classes must be a whole number ≥ 1"),
    ({"num_classes": True}, "number of classes"),
    ({"batch_range": (2000, 3000)}, "lists no batch in 2000:3000"),
    ({"constraint": "mean"}, "unknown workspace constraint"),
    ({"memory_left": lambda b: math.nan}, "not a finite number of bytes"),
    ({"memory_left": lambda b: "lots"}, "not a finite number of bytes"),
    ({"memory_left": lambda b: 1e6}, r"no batch in 16:1024 .* at batch 16, .* need at least 268\.9 MiB of workspace"),
    ({"memory_left": lambda b: 1e6, "constraint": MAX}, r"need at least 106\.8 MiB .*largest of the layers' leanest"),
    ({"memory_left": LinearMemory(1e9, per_sample_bytes=1e8)},
     r"need .* but parameters, optimizer state and activations alone exceed the memory by 572\.2 MiB"),
])
def test_refusals_say_why(alexnet, kwargs, match):
    args = {"table": alexnet, "memory_left": alexnet_memory_left(), "batch_range": (16, 1024), "num_classes": 10,
            **kwargs}
    with pytest.raises(DlschedError, match=match):
        fastest_batch(**args)


@pytest.mark.parametrize("kwargs", [{"capacity": 0}, {"capacity": math.nan}, {"capacity": 1e9, "fixed_bytes": -1},
                                    {"capacity": 1e9, "per_sample_bytes": math.inf}])
def test_linear_memory_refuses_meaningless_numbers(kwargs):
    with pytest.raises(DlschedError, match="memory"):
        LinearMemory(**kwargs)
