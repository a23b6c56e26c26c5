"""FSDP2's units and collective order read from a real ``fully_shard`` job's traces (issue 30, item 5).

The job (``tests/trace_jobs.ddp_traces(dp="fsdp")``): 2 real processes on gloo, the example transformer,
``fully_shard`` on ``embed``, ``layers.0``–``3``, ``norm`` and ``head``, then the root, under
``torch.profiler``. What the trace says is checked against FSDP2's own module tree and against dlsched's
model of the same units (``analyses/fsdp_units``).
"""
from __future__ import annotations

import json

import pytest

from dlsched.analyses.fsdp_units import fsdp_units as model_units
from dlsched.analyses.trace_collectives import collectives
from dlsched.analyses.trace_fsdp import ROOT, fsdp_collectives, fsdp_units, unit_of
from dlsched.formats.kineto_trace import read_kineto
from dlsched.importers.loader import load_model
from tests.conftest import CACHE, run_cli
from tests.trace_jobs import ddp_traces, job_info

UNITS = ["embed", "layers.0", "layers.1", "layers.2", "layers.3", "norm", "head"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def job():
    return ddp_traces(CACHE / "traces", ranks=2, steps=3, model="transformer", batch=2, dp="fsdp")


@pytest.fixture(scope="module")
def found(job):
    t = read_kineto(job / "rank0.json")
    return fsdp_collectives(t, collectives(t))


def test_every_unit_is_gathered_in_forward_order_then_backward_in_reverse_and_reduced_once(found):
    for step, s in found.groupby("step"):
        ag = s[s["kind"] == "all_gather"]
        fwd, bwd = ag[ag["phase"] == "forward"], ag[ag["phase"] == "backward"]
        assert list(fwd["unit"]) == [ROOT] + UNITS  # the root's hook runs first
        assert list(bwd["unit"]) == UNITS[::-1]  # the root is not resharded after forward (FSDP2's default)
        assert list(bwd["prefetched"]) == [False] + [True] * (len(UNITS) - 1)  # implicit backward prefetch
        rs = s[s["kind"] == "reduce_scatter"]
        assert sorted(rs["unit"]) == sorted([ROOT] + UNITS) and (rs["phase"] == "backward").all()
        assert list(s["seq"]) == list(range(len(s)))


def test_unit_sizes_equal_fsdp2s_own_and_dlscheds_model_of_them(job, found):
    """Elements per unit: the job's own count of each unit's parameters, and dlsched's padded bytes / 4."""
    own = job_info(job)["per_rank"][0]["units"]
    g = load_model("examples/torch_models.py:transformer", mode="training", batch=2)
    modeled = {u.module or ROOT: u.padded_bytes // 4 for u in model_units(g, UNITS, workers=2)}
    for unit, x in found.groupby("unit"):
        assert set(x["elements"]) == {modeled[unit]}, unit
        if unit != ROOT:
            assert own[unit] <= modeled[unit] < own[unit] + 2 * 64, unit  # dim 0 padded to a multiple of 2
    assert [u.module for u in model_units(g, UNITS, workers=2)] == ["", *UNITS]  # the same forward order


def test_the_cli_lists_the_units_and_rates_the_step(job):
    proc = run_cli("trace", job, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {r["rank"] for r in out["fsdp"]} == {0, 1}
    rated = [b["efficiency"] for b in out["bounds"] if b["efficiency"] is not None]
    assert rated and all(0 <= e <= 1 for e in rated)  # the step rated with TicTac's E
    assert all(abs(r["error"]) < 0.10 for r in out["replay"])
    names = {c["name"] for c in out["collectives"]}
    assert names == {"allgather", "reduce_scatter"}  # gloo's all-reduce under a reduce-scatter is that one
    text = run_cli("trace", job, "--no-replay").stdout
    assert "FSDP2 units, rank 0" in text and "head norm* layers.3*" in text


def test_record_names():
    assert unit_of("FSDP::post_backward_reduce (layers.3)") == "layers.3"
    assert unit_of("FSDP::backward_prefetch for embed") == "embed"
    assert unit_of("FSDP::root_pre_forward") == ""
    assert unit_of("ProfilerStep#3") is None
