"""torch profiler: per-op oracle rows, and sanity of the per-op times against plain runs (DESIGN §3)."""
from __future__ import annotations

import statistics
import time

import pytest
import torch

from dlsched.errors import DlschedError
from dlsched.factory import call_factory, training_loss
from dlsched.importers.torch_importer import import_factory
from dlsched.profiling.torch_profiler import profile_torch

EX = "examples/torch_models.py"
from dlsched.formats.oracle_file import COLUMNS
ATTEMPTS = 3  # the machine is shared: a ratio outside the band is re-measured before it counts


@pytest.fixture
def one_thread():
    """One intra-op thread: on a loaded 2-core machine, 2-thread kernels stall on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _check_rows(df, graph, runs=5):
    assert list(df.columns) == list(COLUMNS)
    assert list(df["op"]) == [op.name for op in graph.compute_ops()]
    assert (df["runs"] == runs).all()
    assert (df["time"] > 0).all()
    assert (df["time"] <= df["median"]).all()
    assert (df["source"] == "profiled").all() and (df["resource"] == "compute:0").all()
    assert list(df["op_type"]) == [op.op_type for op in graph.compute_ops()]


def _ratio_within(spec, graph, plain_step, low=0.6, high=1.6):
    """Sum of per-op minima / median wall time of 5 plain runs, re-measured up to ATTEMPTS times.

    The plain runs interleave with the profiler's runs (one after each, through
    the progress callback), so both see the same machine load. On a contended
    machine (the plain runs' wall time exceeds their CPU time by a quarter; one
    intra-op thread) no wall-time ratio is meaningful: the median plain run is
    inflated more than the per-op minima (ratio too low), while the plain runs'
    CPU time is not inflated at all (ratio too high). The uncontended ratio lies
    between the two, so then the check is that this bracket meets ``[low, high]``
    (their geometric mean was checked before: with a busy process beside two
    pytest workers, the wall ratio fell to 0.17–0.31 and took it below 0.6 while
    the CPU ratio stayed at 0.69–0.74).
    """
    ratios = []
    for _ in range(ATTEMPTS):
        wall: list[float] = []
        cpu: list[float] = []

        def after_run(done, total):
            start, start_cpu = time.perf_counter(), time.process_time()
            plain_step()
            if done > 1:  # the first plain run is a warm-up, like the profiler's
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)

        df, missing = profile_torch(spec, graph, runs=5, warmup=1, progress=after_run)
        assert not missing and len(wall) == 5
        _check_rows(df, graph)
        total = df["time"].sum()
        wall_ratio = total / statistics.median(wall)
        contended = statistics.median(wall) > 1.25 * statistics.median(cpu)
        cpu_ratio = total / statistics.median(cpu)
        lo, hi = (min(wall_ratio, cpu_ratio), max(wall_ratio, cpu_ratio)) if contended else (wall_ratio, wall_ratio)
        ratios.append({"checked": [round(lo, 3), round(hi, 3)], "wall": round(wall_ratio, 3),
                       "cpu": round(cpu_ratio, 3), "contended": contended})
        if lo <= high and hi >= low:
            return ratios
    pytest.fail(f"sum of per-op minima / plain median outside [{low}, {high}] in {ATTEMPTS} attempts: {ratios}")


@pytest.mark.slow
def test_resnet50_inference_times_sum_to_a_forward_pass(one_thread):
    spec = f"{EX}:resnet50"
    graph = import_factory(spec, batch=8)
    module, inputs, _ = call_factory(spec, 8)
    module.eval()

    def forward():
        with torch.no_grad():
            module(*inputs)

    ratios = _ratio_within(spec, graph, forward)
    print(f"resnet50 inference batch 8: sum(min)/median(forward) = {ratios}")


def test_training_times_sum_to_a_training_step(one_thread):
    spec = f"{EX}:transformer"
    graph = import_factory(spec, mode="training", batch=8)
    module, inputs, _ = call_factory(spec, 8)
    module.train()
    params = list(module.parameters())

    def step():  # what the joint graph holds: forward, loss, gradients
        with torch.enable_grad():  # the progress callback runs inside the profiler's no_grad
            torch.autograd.grad(training_loss(module(*inputs)), params)

    ratios = _ratio_within(spec, graph, step)
    print(f"transformer training batch 8: sum(min)/median(step) = {ratios}")
    phases = {op.phase for op in graph.compute_ops()}
    assert phases == {"forward", "backward"}


@pytest.mark.parametrize("name", ["lstm", "gru_bidirectional"])
def test_recurrent_training_profiles_op_by_op(one_thread, name):
    """An LSTM's and a bidirectional GRU's training graphs re-run op by op (the CPU kernel keeps its backward
    workspace only in grad mode), and their per-op minima add up to a training step."""
    spec = f"{EX}:{name}"
    graph = import_factory(spec, mode="training")
    module, inputs, _ = call_factory(spec)
    module.train()
    params = list(module.parameters())

    def step():
        with torch.enable_grad():
            torch.autograd.grad(training_loss(module(*inputs)), params)

    ratios = _ratio_within(spec, graph, step, low=0.6, high=1.3)
    print(f"{name} training: sum(min)/median(step) = {ratios}")
    assert {op.phase for op in graph.compute_ops()} == {"forward", "backward"}


def test_training_graph_with_batchnorm_buffers(torch_factories):
    spec = f"{torch_factories}:bnnet"
    graph = import_factory(spec, mode="training", batch=4, buffers=True)
    df, missing = profile_torch(spec, graph, runs=2, warmup=0)
    assert not missing
    _check_rows(df, graph, runs=2)
    assert "native_batch_norm_backward" in set(df["op"])


def test_progress_and_run_counts():
    spec = f"{EX}:small_cnn"
    graph = import_factory(spec, batch=4)
    calls = []
    df, missing = profile_torch(spec, graph, runs=3, warmup=2, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, 5) for i in range(1, 6)]
    assert missing == {}
    _check_rows(df, graph, runs=3)
    assert set(df.loc[df["op_type"] == "Conv2d", "op"]) == {"conv1", "conv2", "conv3"}


def test_ops_the_model_lacks_are_reported_not_invented():
    spec = f"{EX}:small_cnn"
    graph = import_factory(spec, batch=2)
    graph.add_op("bogus_op", "compute", op_type="Conv2d")
    df, missing = profile_torch(spec, graph, runs=1, warmup=0)
    assert list(missing) == ["bogus_op"] and "no node named 'bogus_op'" in missing["bogus_op"]
    assert "bogus_op" not in set(df["op"]) and len(df) == len(graph.compute_ops()) - 1


@pytest.mark.parametrize("kwargs, needle", [
    ({"runs": 0}, "--runs must be at least 1"),
    ({"warmup": -1}, "--warmup"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
])
def test_bad_arguments(kwargs, needle):
    spec = f"{EX}:small_cnn"
    graph = import_factory(spec, batch=2)
    with pytest.raises(DlschedError, match=needle.replace("(", r"\(")):
        profile_torch(spec, graph, **kwargs)


def test_cuda_requested_without_a_device():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present; test_cuda_events_path covers it")
    spec = f"{EX}:small_cnn"
    graph = import_factory(spec, batch=2)
    with pytest.raises(DlschedError, match="no CUDA device is available"):
        profile_torch(spec, graph, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["inference", "training"])
def test_cuda_events_path(mode):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the CUDA-event timing path needs a GPU")
    spec = f"{EX}:resnet50"
    graph = import_factory(spec, mode=mode, batch=8)
    df, missing = profile_torch(spec, graph, device="cuda", runs=5, warmup=2)
    assert not missing
    assert list(df["op"]) == [op.name for op in graph.compute_ops()]
    assert (df["time"] >= 0).all() and (df["time"] <= df["median"]).all() and (df["runs"] == 5).all()
    convs = df[df["op_type"].isin(["Conv2d", "aten.convolution.default"])]
    assert (convs["time"] > 0).all()
    # An op that launches no kernel takes no GPU time: the spin before it hides the host's dispatch.
    free = df[df["op_type"].isin(["flatten", "getitem", "aten.detach.default", "aten.view.default"])]
    assert len(free) and (free["time"] < 3e-6).all(), free["time"].max()
