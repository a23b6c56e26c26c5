"""``profile --from-trace`` on public traces of real GPU runs: op times from the kernels each op launched,
aliases, shapes, recomputation, and coverage by compute time (issue 28).

The traces are in ``../shared/traces`` (README there): a single-GPU AlexNet (PARAM benchmark, warm-up and
measured forward), rank 0 of an 8-GPU MI300X DDP ResNet-18 with activation checkpointing (batch 10, bf16),
rank 0 of a 16-GPU NVIDIA job, and two CPU-only traces.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.formats.kineto_trace import read_kineto
from dlsched.profiling import kernel_times as kt
from dlsched.profiling.kineto_events import COMPUTE, device_events
from dlsched.profiling.trace_aliases import op_family
from dlsched.profiling.trace_import import TraceError, _fits, _lcs_pairs, _shape_key, import_trace
from tests.conftest import assert_clean_error, run_cli
from tests.trace_files import shared_trace

ALEXNET = "examples/torch_models.py:alexnet"
RESNET18 = "examples/torch_models.py:resnet18"
ROCM = "ddp_resnet18_actckpt_8xMI300X_rank0.json.gz"


@pytest.fixture(scope="module")
def graphs():
    from dlsched.importers.loader import load_model

    return {"alexnet": load_model(ALEXNET, batch=8),
            "resnet18": load_model(RESNET18, mode="training", batch=10)}


# --- units -----------------------------------------------------------------------------------------------


def test_alias_table_maps_dispatch_spellings_to_the_dag_types():
    """The spellings aten dispatch gives on NVIDIA, AMD and CPU, and those make_fx and modules give."""
    for names in (("aten::cudnn_batch_norm", "aten::batch_norm", "aten::_batch_norm_impl_index",
                   "aten::native_batch_norm", "aten::miopen_batch_norm", "aten.native_batch_norm.default",
                   "aten._native_batch_norm_legit.default", "BatchNorm2d"),
                  ("aten::_convolution", "aten::cudnn_convolution", "aten::miopen_convolution", "aten::conv2d",
                   "aten.convolution.default", "Conv2d"),
                  ("aten::convolution_backward", "aten.convolution_backward.default"),
                  ("aten::miopen_batch_norm_backward", "aten::cudnn_batch_norm_backward",
                   "aten.native_batch_norm_backward.default"),
                  ("aten::linear", "aten::addmm", "aten::mm", "aten.addmm.default", "Linear"),
                  ("aten::max_pool2d", "aten.max_pool2d_with_indices.default", "MaxPool2d"),
                  ("aten::relu_", "aten.relu.default", "ReLU")):
        assert len({op_family(n) for n in names}) == 1, names
    assert op_family("aten::conv2d") != op_family("aten::convolution_backward")
    assert op_family("aten::batch_norm") != op_family("aten::native_batch_norm_backward")


def test_shape_agreement():
    """A DAG op's tensors must be among the trace op's; transposed weights agree; the batch does not."""
    addmm = _shape_key([[1000], [10, 512], [512, 1000]])
    linear = _shape_key([[10, 512], [1000, 512], [1000]])
    assert _fits(addmm, linear)
    assert _fits(_shape_key([[8, 3, 224, 224]]), _shape_key([[8, 3, 224, 224], [64, 3, 11, 11], [], []]))
    assert not _fits(_shape_key([[8, 3, 224, 224], [64, 3, 7, 7]]), _shape_key([[10, 3, 224, 224], [64, 3, 7, 7]]))
    assert not _fits(_shape_key([[10, 64, 56, 56], [64, 64, 1, 1]]), _shape_key([[10, 64, 56, 56], [64, 64, 3, 3]]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=12), st.lists(st.integers(0, 3), max_size=12))
def test_lcs_pairs_is_a_longest_common_subsequence(a, b):
    """Pairs are increasing in both, pair equal items, and are as many as the textbook DP finds."""
    pairs = _lcs_pairs(a, b)
    assert all(a[i] == b[j] for i, j in pairs)
    assert all(i1 < i2 and j1 < j2 for (i1, j1), (i2, j2) in zip(pairs, pairs[1:]))
    best = np.zeros((len(a) + 1, len(b) + 1), dtype=int)
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            best[i, j] = best[i - 1, j - 1] + 1 if a[i - 1] == b[j - 1] else max(best[i - 1, j], best[i, j - 1])
    assert len(pairs) == best[-1, -1]
    # A veto (shapes differ) is respected: no pair where fits says no.
    veto = np.array([x % 2 == 0 for x in b], dtype=bool)
    assert all(veto[j] for _, j in _lcs_pairs(a, b, lambda i: veto))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.floats(0, 100), st.floats(0, 10)), min_size=1, max_size=8),
       st.lists(st.tuples(st.sampled_from("ab"), st.floats(0, 120)), max_size=20))
def test_containing_finds_the_interval_holding_each_point(raw, points):
    """Against a brute-force scan, on disjoint intervals per thread."""
    ivs = []
    for th in "ab":  # make each thread's intervals disjoint: keep those that start after the last ended
        end = -1.0
        for t, ts, d in sorted(x for x in raw if x[0] == th):
            if ts > end + 1e-2:
                ivs.append((t, ts, ts + d))
                end = ts + d
    got = kt.containing(pd.Series([p[0] for p in points], dtype=object), np.array([p[1] for p in points]),
                        pd.Series([i[0] for i in ivs], dtype=object), np.array([i[1] for i in ivs]),
                        np.array([i[2] for i in ivs]))
    for (th, x), k in zip(points, got):
        hits = [n for n, (t, s, e) in enumerate(ivs) if t == th and s <= x <= e + 1e-3]
        assert (k in hits) if hits else k == -1


def test_every_device_event_of_the_rocm_trace_joins_or_predates_the_host_window():
    """968 of its 3,653 device events have no launch: their correlation ids (4066-5178) all precede the first
    runtime call's (5179): kernels queued before the profiler opened its host window, not a broken join."""
    ev = read_kineto(shared_trace(ROCM)).events
    dev = kt.device_launches(ev)
    lost = dev[dev["thread"].isna()]
    runtime = ev[ev["cat"] == "cuda_runtime"]
    assert len(dev) == 3653 and len(lost) == 968
    assert lost["correlation"].max() < runtime["correlation"][runtime["correlation"] >= 0].min()
    assert set(runtime["name"]) >= {"hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync"}


def test_kernels_of_the_16_gpu_trace_join_to_host_ops():
    """The 16-GPU NVIDIA trace (a model we do not have): the share of compute-kernel time joined to a host op."""
    share = kt.host_join_share(read_kineto(shared_trace("nccl_rank0_of16.json.gz")).events)
    print(f"\nnccl_rank0_of16: compute kernels {share['compute_us'] / 1e3:.1f} ms, launched in the trace "
          f"{share['launched_us'] / 1e3:.1f} ms, joined to a host op {share['joined_us'] / 1e3:.1f} ms "
          f"({share['share']:.1%} of launched, {share['share_of_all']:.1%} of all), to a cpu_op "
          f"{share['cpu_op_us'] / 1e3:.1f} ms")
    assert share["share"] >= 0.95
    # apex's FusedAdam launches from its record_function, not from an aten op: cpu_ops alone join less.
    assert share["cpu_op_us"] < share["joined_us"]


def test_alexnet_op_times_add_up_to_the_kernels(graphs):
    """Both forwards (warm-up and measured) of the PARAM AlexNet trace: every compute kernel launched inside
    them goes to an op, so the ops' kernel times summed over both equal the file's compute-kernel total but
    for the one kernel outside them (the input's aten::rand, 71 us)."""
    path = shared_trace("alexnet_1gpu.json.gz")
    r = import_trace(path, graphs["alexnet"])
    cov = r.coverage
    dev = device_events(read_kineto(path).events)
    file_total = dev.loc[dev["kind"] == COMPUTE, "dur"].sum() * 1e-6
    print(f"\nalexnet: ops' compute kernels over both iterations {cov['matched_time'] * 1e3:.3f} ms, "
          f"file's compute kernels {file_total * 1e3:.3f} ms, coverage {cov['time_fraction']:.2%}")
    assert cov["times"] == "gpu kernels" and cov["iterations"] == 2 and cov["matched"] == cov["compute_ops"]
    assert cov["compute_time"] == pytest.approx(file_total)
    assert cov["matched_time"] == pytest.approx(file_total, rel=0.01)
    assert cov["time_fraction"] >= 0.95
    assert list(cov["unmatched_time"]) == ["aten::rand"]
    t = r.frame.set_index("op")
    # conv2 spends 15 ms dispatching on the host during the measured forward, 0.73 ms of kernels.
    assert t.loc["conv2", "host_time"] > 10 * t.loc["conv2", "time"]
    assert (t["time"] <= t["median"]).all() and (t["runs"] == 2).all()


def test_rocm_resnet18_training_is_timed_from_kernels_with_recompute(graphs):
    r = import_trace(shared_trace(ROCM), graphs["resnet18"], min_coverage=0.8)
    cov = r.coverage
    print(f"\nROCm ResNet-18: coverage {cov['time_fraction']:.2%} of {cov['compute_time'] * 1e3:.2f} ms compute "
          f"kernels over {cov['iterations']} steps (per step {cov['per_step_time_fraction']}); recompute "
          f"{cov['recompute_time'] * 1e3:.2f} ms on {cov['recomputed_ops']} ops; before the trace "
          f"{cov['kernels_launched_before_trace'] * 1e3:.2f} ms; unmatched {cov['unmatched_time']}")
    assert cov["times"] == "gpu kernels" and cov["iterations"] == 3
    assert cov["time_fraction"] >= 0.95 and min(cov["per_step_time_fraction"]) >= 0.95
    assert cov["shape_refusals"] == 0
    t = r.frame.set_index("op")
    g = graphs["resnet18"]
    types = {op.name: op.op_type for op in g.compute_ops()}
    conv_fwd = [n for n in t.index if types[n] == "aten.convolution.default"]
    conv_bwd = [n for n in t.index if types[n] == "aten.convolution_backward.default"]
    bn = [n for n in t.index if types[n] == "aten.native_batch_norm.default"]
    assert len(conv_fwd) == 20 and len(conv_bwd) == 20 and len(bn) == 20  # miopen spellings found
    # Layers 1-4 run under checkpointing: their forward ops ran twice, the stem's once.
    assert t.loc["convolution", "recompute"] == 0 and (t.loc[conv_fwd[1:], "recompute"] > 0).all()
    assert cov["recomputed_ops"] >= 19 * 2


def test_shapes_refuse_another_model_unit(graphs):
    """The ROCm ResNet-18 trace offered for ResNet-50: types match, shapes do not."""
    from dlsched.importers.loader import load_model

    g = load_model("examples/torch_models.py:resnet50", mode="training", batch=10)
    with pytest.raises(TraceError, match="shapes differ") as e:
        import_trace(shared_trace(ROCM), g, min_coverage=0.8)
    assert "coverage" in str(e.value)
    r = import_trace(shared_trace(ROCM), g)  # no threshold: the figures, with the reasons
    assert r.coverage["time_fraction"] < 0.8 and r.coverage["shape_refusals"] > 100
    assert any("shapes differ: trace [[" in why for why in r.untimed.values())


# --- through the CLI, as a user would -------------------------------------------------------------------


def test_cli_alexnet(tmp_path):
    out = tmp_path / "alexnet.csv"
    proc = run_cli("profile", ALEXNET, "--from-trace", shared_trace("alexnet_1gpu.json.gz"), "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    tr = json.loads(proc.stdout)["trace"]
    assert tr["time_fraction"] >= 0.95 and tr["times"] == "gpu kernels"
    df = pd.read_csv(out)
    comp = df[df["source"] == "trace"]
    assert len(comp) == 22 and (comp["host_time"] > 0).all()
    text = run_cli("profile", ALEXNET, "--from-trace", shared_trace("alexnet_1gpu.json.gz"), "-o", out).stdout
    assert "99.3% of the trace's GPU compute-kernel time" in text


def test_cli_rocm_resnet18(tmp_path):
    out = tmp_path / "r18.csv"
    proc = run_cli("profile", RESNET18, "--mode", "training", "--batch", "10", "--from-trace", shared_trace(ROCM),
                   "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    tr = json.loads(proc.stdout)["trace"]
    assert tr["time_fraction"] >= 0.95 and tr["recompute_time"] > 0
    assert {"host_time", "recompute"} <= set(pd.read_csv(out).columns)


@pytest.mark.parametrize("model, trace, extra, needles", [
    ("examples/torch_models.py:small_cnn", "cpu_only_gloo_rank34.json.gz", (), ("0% coverage", "host op time")),
    ("examples/torch_models.py:resnet50", ROCM, ("--mode", "training", "--batch", "10"),
     ("coverage", "shapes differ", "--min-coverage")),
    ("examples/torch_models.py:small_cnn", "cpu_only_rank0_2424ops.json.gz", (), ("coverage", "aten::linear")),
    (RESNET18, ROCM, ("--mode", "training"), ("coverage", "--batch 10")),
])
def test_cli_refuses_traces_of_other_models(tmp_path, model, trace, extra, needles):
    out = tmp_path / "o.csv"
    proc = run_cli("profile", model, *extra, "--from-trace", shared_trace(trace), "-o", out)
    assert_clean_error(proc, trace, *needles)
    assert not out.exists()


def test_cli_min_coverage_is_the_users_to_set(tmp_path):
    """The 2,424-op CPU trace is 0-1% small_cnn: --min-coverage 0 lets it through, out of range is refused."""
    out = tmp_path / "o.csv"
    trace = shared_trace("cpu_only_rank0_2424ops.json.gz")
    proc = run_cli("profile", "examples/torch_models.py:small_cnn", "--from-trace", trace, "-o", out,
                   "--min-coverage", "0", "--default-time", "1us", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["trace"]["time_fraction"] < 0.05 and out.exists()
    assert_clean_error(run_cli("profile", "examples/torch_models.py:small_cnn", "--from-trace", trace,
                               "-o", out, "--min-coverage", "1.5"), "--min-coverage")
