"""``dlsched trace``, as a user runs it: real multi-rank gloo DDP traces and the public GPU traces (issue 28).

The generated jobs (``tests/trace_jobs.py``) are torch's own DDP on gloo with
``torch.profiler`` on every rank; in the slow job rank 1 runs in a CPU cgroup
(or sleeps, where cgroups are unavailable), so the straggler is known.
"""
from __future__ import annotations

import json

import pytest

from dlsched.formats.kineto_trace import read_kineto
from dlsched.profiling.kineto_events import steps as profiler_steps
from tests.conftest import CACHE, assert_clean_error, run_cli
from tests.trace_files import shared_trace
from tests.trace_jobs import ddp_traces

JOBS = CACHE / "traces"


@pytest.fixture(scope="module")
def slow_job():
    return ddp_traces(JOBS, ranks=3, slow_rank=1)


@pytest.fixture(scope="module")
def slow_report(slow_job):
    proc = run_cli("trace", slow_job, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_slowed_rank_is_the_straggler_in_most_steps(slow_report):
    s = slow_report["stragglers"]  # 4 of 5 at least: a loaded machine once made another rank the busiest in one
    assert len(s) == 5 and sum(row["straggler"] == 1 for row in s) >= 4, s
    assert all(0 < row["share"] < 1 for row in s)


def test_per_step_times_are_the_profiler_step_spans(slow_job, slow_report):
    for rank, path in slow_report["files"].items():
        spans = profiler_steps(read_kineto(path).events).set_index("step")
        rows = [r for r in slow_report["per_step"] if r["rank"] == int(rank)]
        assert {r["step"] for r in rows} == set(spans.index)
        for r in rows:
            assert r["end"] - r["ts"] == pytest.approx(spans.loc[r["step"], "dur"], abs=1e-3)  # 1 ns of float error


def test_every_step_is_rated_in_bounds_or_a_model_error(slow_report):
    for b in slow_report["bounds"]:
        if b["efficiency"] is None:
            assert b["model_error"] != 0
        else:
            assert 0.0 <= b["efficiency"] <= 1.0 and b["model_error"] == 0


def test_replay_error_is_within_ten_percent(slow_report):
    errors = sorted(abs(r["error"]) for r in slow_report["replay"])
    assert errors[len(errors) // 2] <= 0.10, errors


def test_the_table_names_the_straggler(slow_job):
    proc = run_cli("trace", slow_job)
    assert proc.returncode == 0, proc.stderr
    assert "across ranks" in proc.stdout and "straggler" in proc.stdout
    assert "DDP buckets" in proc.stdout and "Traceback" not in proc.stderr


def test_the_rocm_ddp_trace(tmp_path):
    out = json.loads(run_cli("trace", shared_trace("ddp_resnet18_actckpt_8xMI300X_rank0.json.gz"), "--json").stdout)
    by_step = {}
    for b in out["buckets"]:
        by_step.setdefault(b["step"], []).append((b["elements"], b["dtype"], b["group_size"]))
    assert by_step == {s: [(2_873_320, "BFloat16", 8), (8_816_192, "BFloat16", 8)] for s in (15, 16, 17)}
    assert {round(h["idle_time_pctg"] + h["compute_time_pctg"] + h["non_compute_time_pctg"]) for h in out["hta"]} \
        == {100}
    errors = sorted(abs(r["error"]) for r in out["replay"])
    assert errors[len(errors) // 2] <= 0.10


def test_a_trace_without_steps_is_one_whole_trace_row():
    proc = run_cli("trace", shared_trace("alexnet_1gpu.json.gz"), "--no-replay")
    assert proc.returncode == 0 and "no ProfilerStep" in proc.stdout and " all " in proc.stdout


@pytest.mark.parametrize("make,needle", [
    (lambda d: shared_trace("simple_add_et.json.gz"), "Execution Trace"),
    (lambda d: d, "no trace files"),
    (lambda d: (d / "t.json.gz").write_bytes(shared_trace("alexnet_1gpu.json.gz").read_bytes()[:5000]) and
     d / "t.json.gz", "truncated"),
])
def test_bad_input_exits_2_with_one_paragraph(tmp_path, make, needle):
    assert_clean_error(run_cli("trace", make(tmp_path)), needle)


def test_two_files_of_one_rank_are_refused(tmp_path):
    a = shared_trace("cpu_only_gloo_rank34.json.gz")
    (tmp_path / "x.json.gz").write_bytes(a.read_bytes())
    (tmp_path / "y.json.gz").write_bytes(a.read_bytes())
    assert_clean_error(run_cli("trace", tmp_path), "rank 34")


def test_a_host_bound_gpu_step_is_named_and_gets_no_e():
    """A real DDP step over NCCL on an H200 (benchmarks/gpu_check.sh): 17 ms of ResNet-50 kernels in a device
    makespan of 50 ms and more, the GPU waiting for launches. No order of the streams explains it: no E, a note."""
    from tests.conftest import REPO

    proc = run_cli("trace", REPO / "benchmarks/results/gpu/ddp_resnet50_h200_rank0.json.gz", "--json",
                   "--no-replay")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [n for n in out["notes"] if n.startswith("host-bound: in 3 of 3 device steps")]
    for b in out["bounds"]:
        assert b["resources"] == "device" and b["efficiency"] is None
        assert 0.015 < b["compute"] < 0.02 and b["idle"] > b["compute"] and b["model_error"] > 0
    clean = run_cli("trace", shared_trace("ddp_resnet18_actckpt_8xMI300X_rank0.json.gz"), "--json", "--no-replay")
    assert not [n for n in json.loads(clean.stdout)["notes"] if n.startswith("host-bound")]
