"""DDP's gradient buckets: dlsched's prediction (``analyses/ddp_buckets.py``) against torch's own DDP.

The peer's numbers come from a real ``DistributedDataParallel`` job (gloo, 2
processes, CPU) profiled from its first iteration, read with dlsched's own
trace analysis (``trace_collectives.ddp_buckets``): step 0 holds the buckets
DDP launched before it rebuilt them, steps 1 and 2 those after (``tests/trace_jobs.py``).
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.ddp_buckets import (
    DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES, bucket_assignment, ddp_buckets_of, step_shape,
)
from dlsched.analyses.grad_ready_order import ready_order
from dlsched.importers.loader import load_model
from tests.conftest import CACHE
from tests.trace_jobs import cap_name, ddp_bucket_traces, traced_buckets

MODELS = ["small_cnn", "transformer", "lstm"]
CAPS = [None, 1, 10, 0.1]  # 0.1 MiB: many buckets even for the small ones
BATCH = 2


@pytest.fixture(scope="module")
def job():
    return ddp_bucket_traces(CACHE / "traces", [f"examples/torch_models.py:{m}" for m in MODELS], CAPS,
                             batch=BATCH, steps=3)


@pytest.fixture(scope="module")
def graphs():
    return {m: load_model(f"examples/torch_models.py:{m}", mode="training", batch=BATCH) for m in MODELS}


@pytest.mark.parametrize("cap", CAPS, ids=lambda c: f"cap{c}")
@pytest.mark.parametrize("name", MODELS)
def test_predicted_buckets_equal_the_traced_ones_before_and_after_the_rebuild(job, graphs, name, cap):
    traced = traced_buckets(job, name, cap)
    before = [b.bytes for b in ddp_buckets_of(graphs[name], cap, rebuilt=False)]
    after = [b.bytes for b in ddp_buckets_of(graphs[name], cap)]
    assert traced[0] == before
    assert traced[1] == traced[2] == after
    # the trace and DDP's own log agree, so the trace is read right
    logged = json.loads((job / "job.json").read_text())["per_rank"][0]["logging"][f"{name}/{cap_name(cap)}"]
    assert logged["bucket_sizes"] == before and logged["rebuilt_bucket_sizes"] == after


def test_resnet18_at_the_default_cap_gives_pytorch_issue_48880s_bytes():
    g = load_model("examples/torch_models.py:resnet18", mode="training", batch=1)
    assert [b.bytes for b in ddp_buckets_of(g)] == [2_052_000, 28_852_224, 15_853_824]
    first = ddp_buckets_of(g)[0].params
    assert first == ("fc.bias", "fc.weight")  # the last layer's gradients are ready first, bias before weight


def test_resnet18_in_bf16_gives_the_buckets_of_the_public_8_gpu_rocm_trace():
    """A public DDP trace (8 MI300X, ResNet-18 in bf16, torch's default cap): its buckets hold 2,873,320 and
    8,816,192 elements, read with dlsched's trace analysis. Predicted: the same ready order at 2 bytes a parameter."""
    from dlsched.analyses.trace_collectives import ddp_buckets
    from dlsched.formats.kineto_trace import read_kineto
    from tests.trace_files import shared_trace

    try:
        path = shared_trace("ddp_resnet18_actckpt_8xMI300X_rank0.json.gz")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    traced = ddp_buckets(read_kineto(path)).groupby("step")["elements"].apply(list)
    g = load_model("examples/torch_models.py:resnet18", mode="training", batch=1)
    elements = {s.param: s.params for s in g.sends()}
    order = ready_order(g)
    buckets = bucket_assignment([2 * elements[p] for p in order], DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES)
    predicted = [sum(elements[order[i]] for i in b) for b in buckets]
    assert all(t == predicted for t in traced) and len(traced) == 3


def test_find_unused_parameters_buckets_equal_the_traced_ones(graphs):
    """DDP with ``find_unused_parameters=True`` cuts its buckets by size from the first iteration and keeps them."""
    job = ddp_bucket_traces(CACHE / "traces", ["examples/torch_models.py:transformer"], [None, 1], batch=BATCH,
                            steps=2, find_unused=True)
    for cap in (None, 1):
        traced = traced_buckets(job, "transformer", cap)
        predicted = [b.bytes for b in ddp_buckets_of(graphs["transformer"], cap, find_unused_parameters=True)]
        assert traced[0] == traced[1] == predicted
        assert len(predicted) > 1


def test_find_unused_parameters_buckets_by_registration_from_the_start_and_never_rebuilds(graphs):
    g = graphs["transformer"]
    initial = ddp_buckets_of(g, None, find_unused_parameters=True, rebuilt=False)
    assert initial == ddp_buckets_of(g, None, find_unused_parameters=True, rebuilt=True)
    names = [r.name for r in g.recvs()]
    assert [p for b in initial for p in b.params] != names  # buckets reversed: the last registered first
    assert sorted(p for b in initial for p in b.params) == sorted(names)
    assert initial[-1].params[0] == names[0]


@pytest.mark.parametrize("spec", ["examples/torch_models.py:transformer", "examples/hf_models.py:gpt2"])
def test_ready_order_is_the_order_autograd_accumulates_the_gradients(spec):
    """Against eager autograd itself: a hook after each parameter's AccumulateGrad, where DDP's sits.
    GPT-2's Conv1D (``addmm(bias, x, weight)``) completes bias and weight in one node: bias first."""
    if "hf_models" in spec:
        pytest.importorskip("transformers")
    from dlsched.factory import call_factory, training_loss

    module, inputs, _ = call_factory(spec, BATCH)
    module.train()
    seen, names = [], {id(p): n for n, p in module.named_parameters()}
    for p in module.parameters():
        p.register_post_accumulate_grad_hook(lambda p: seen.append(names[id(p)]))
    training_loss(module(*inputs)).backward()
    assert ready_order(load_model(spec, mode="training", batch=BATCH)) == seen


def test_ready_order_is_every_trained_parameter_once(graphs):
    for g in graphs.values():
        assert sorted(ready_order(g)) == sorted(s.param for s in g.sends())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5_000_000), min_size=1, max_size=60), st.integers(1, 8_000_000),
       st.integers(1, 8_000_000))
def test_no_gradient_is_lost_and_each_bucket_closes_at_its_cap(sizes, cap, first):
    buckets = bucket_assignment(sizes, cap, first)
    assert [i for b in buckets for i in b] == list(range(len(sizes)))  # every gradient once, in order
    for k, b in enumerate(buckets):
        limit = first if k == 0 else cap
        total = sum(sizes[i] for i in b)
        assert total - sizes[b[-1]] < limit  # it closed as soon as it reached its cap
        if k < len(buckets) - 1:
            assert total >= limit


def test_resnet18_fc_fills_the_first_bucket_alone():
    """pytorch issue #48880's figure: ResNet-18's fc (bias then weight, 2,052,000 B) is its first bucket."""
    buckets = bucket_assignment([4_000, 2_048_000, 1_048_576], DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES)
    assert buckets[0] == [0, 1]


def test_step_shape_packs_in_the_ready_order(graphs):
    g = graphs["transformer"]
    shape = step_shape(g, {op.name: 1e-3 for op in g.ops()})
    assert list(shape.bucket_bytes) == [b.bytes for b in ddp_buckets_of(g)]


def test_resnet50_buckets_equal_a_real_nccl_ddp_trace_on_a_gpu():
    """A real CUDA trace (benchmarks/gpu_check.sh: torch 2.11 DDP over NCCL on an H200, ResNet-50 in fp32,
    torch's default cap): its five all-reduces per step carry exactly the predicted, rebuilt buckets."""
    from dlsched.analyses.trace_collectives import ddp_buckets
    from dlsched.formats.kineto_trace import read_kineto
    from tests.conftest import REPO

    traced = ddp_buckets(read_kineto(REPO / "benchmarks/results/gpu/ddp_resnet50_h200_rank0.json.gz"))
    g = load_model("examples/torch_models.py:resnet50", mode="training", batch=1)
    predicted = [b.bytes // 4 for b in ddp_buckets_of(g)]
    assert predicted == [2_049_000, 7_875_584, 6_563_840, 6_637_568, 2_431_040]
    assert [list(e) for _, e in traced.groupby("step")["elements"]] == [predicted] * 3
