"""Collectives read from real traces, matched across the ranks of real DDP jobs (issue 28).

The GPU traces are public traces of real runs (``tests/trace_files.py``); the multi-rank traces
come from real DDP jobs on gloo run here (``tests/trace_jobs.py``, cached), one of them with a
rank slowed on purpose, so the straggler is known. What DDP really used is asked of DDP itself
inside the job (its reducer's buckets) and compared with what the traces say.
"""
from __future__ import annotations

import gzip
import json
import shutil
import warnings
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses.trace_collectives import collectives, ddp_buckets
from dlsched.analyses.trace_ranks import rank_report
from dlsched.errors import DlschedWarning
from dlsched.formats.kineto_trace import TraceError, read_kineto, read_kineto_dir
from tests.conftest import CACHE
from tests.trace_files import shared_trace
from tests.trace_jobs import ddp_traces, job_info

ROCM = "ddp_resnet18_actckpt_8xMI300X_rank0.json.gz"
NCCL16 = "nccl_rank0_of16.json.gz"
JOBS = CACHE / "traces"


def _raw_events(path: Path) -> list[dict]:
    """The file's complete events, parsed plainly (no dlsched code), to check against by hand."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _raw_steps(events: list[dict]) -> dict[int, tuple[float, float]]:
    """Step number → (ts, dur) of the host's ProfilerStep#N."""
    return {int(e["name"].split("#")[1]): (float(e["ts"]), float(e["dur"])) for e in events
            if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"}


# ---------------------------------------------------------------- public GPU traces

def test_rocm_ddp_buckets_are_the_known_sizes():
    t = read_kineto(shared_trace(ROCM))
    b = ddp_buckets(t)
    per_step = b.groupby("step")["elements"].apply(list).to_dict()
    assert per_step == {15: [2873320, 8816192], 16: [2873320, 8816192], 17: [2873320, 8816192]}
    assert set(b["dtype"]) == {"BFloat16"} and set(b["group_size"]) == {8}
    assert (b["bytes"] == 2 * b["elements"]).all()
    c = collectives(t)
    # the buffers DDP broadcasts before each forward are collectives, but not buckets
    in_steps = c[c["step"] >= 0]
    assert Counter(in_steps["name"]) == {"broadcast": 6, "allreduce": 6}
    assert all(r == list(range(8)) for r in in_steps["group_ranks"])
    # each one linked to its RCCL kernel: device span, stream, all four events of it counted once
    assert (in_steps["kernels"] == 1).all() and (in_steps["stream"] == 4).all()
    assert in_steps["source"].str.endswith("nccl:all_reduce+kernel").sum() == 6
    assert (in_steps["end"] > in_steps["start"]).all() and (in_steps["start"] > in_steps["launch_ts"]).all()


def test_rocm_kernels_counted_once():
    t = read_kineto(shared_trace(ROCM))
    raw = _raw_events(shared_trace(ROCM))
    nccl_kernels = [e for e in raw if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel")]
    c = collectives(t)
    assert c["kernels"].sum() == len(nccl_kernels) == 17
    # five kernels ran before the trace's first launch: kept, outside the steps, never given to a host op
    assert (c.loc[c["source"] == "kernel", "step"] == -1).sum() == 5
    rpc = [e for e in raw if e["name"] == "record_param_comms"]
    waits = [e for e in rpc if e["args"].get("Collective name") == "wait"]
    assert len(c[c["step"] >= 0]) == len(rpc) - len(waits) == 12
    assert c.attrs["not_collectives"] == len(waits)


def test_nccl16_collectives_per_step_by_hand():
    path = shared_trace(NCCL16)
    c = collectives(read_kineto(path))
    steps = c[c["step"] >= 0]
    per_step = {s: Counter(g["name"]) for s, g in steps.groupby("step")}
    # from the raw events: in each step's host span, the c10d ops by name
    raw = _raw_events(path)
    spans = _raw_steps(raw)
    c10d = {"c10d::alltoall_base_": "all_to_all", "c10d::_reduce_scatter_base_": "reduce_scatter",
            "c10d::allreduce_": "allreduce", "c10d::_allgather_base_": "allgather"}
    by_hand = {s: Counter(c10d[e["name"]] for e in raw if e["name"] in c10d and a <= e["ts"] < a + d)
               for s, (a, d) in spans.items()}
    assert per_step == by_hand
    assert per_step == {s: {"all_to_all": 11, "reduce_scatter": 2, "allreduce": 2, "allgather": 2}
                        for s in range(550, 555)}
    # sizes from the nccl:* records' input dims; the group of the sharded ops from output/input
    s550 = steps[steps["step"] == 550]
    rs = s550[s550["name"] == "reduce_scatter"]
    assert rs["elements"].tolist() == [65536 * 384, 65536 * 64] and rs["out_elements"].tolist() == [8192 * 384,
                                                                                                     8192 * 64]
    assert set(s550.loc[s550["name"].isin(["reduce_scatter", "allgather"]), "group_size"]) == {8}
    assert s550.loc[s550["name"] == "allreduce", "elements"].tolist() == [366336, 447923396]
    assert (s550["dtype"] != "").all()
    # an all-to-all of no elements launches no kernel; every other collective one
    empty = s550["elements"] == 0
    assert empty.sum() == 2 and (s550.loc[empty, "kernels"] == 0).all() and (s550.loc[~empty, "kernels"] == 1).all()
    kernels = [e for e in raw if e.get("cat") == "kernel" and "nccl" in e["name"]]
    assert c["kernels"].sum() == len(kernels) == 80


def test_no_collectives_in_a_single_gpu_trace():
    c = collectives(read_kineto(shared_trace("alexnet_1gpu.json.gz")))
    assert c.empty and list(c.columns)[:4] == ["step", "seq", "name", "elements"]


# ---------------------------------------------------------------- real DDP jobs on gloo

@pytest.fixture(scope="module")
def even_job() -> Path:
    return ddp_traces(JOBS, ranks=2)


@pytest.fixture(scope="module")
def slow_job() -> Path:
    return ddp_traces(JOBS, ranks=3, slow_rank=1)


@pytest.fixture(scope="module")
def sleepy_job() -> Path:
    return ddp_traces(JOBS, ranks=2, slow_rank=0, slow_by="sleep")


def test_gloo_buckets_are_what_ddp_used(even_job, slow_job):
    for job in (even_job, slow_job):
        info = job_info(job)
        for t in read_kineto_dir(job):
            used = [sum(b) for b in info["per_rank"][t.rank]["reducer_buckets_elements"]]
            assert len(used) >= 2 and sum(used) == info["per_rank"][t.rank]["parameters"]
            b = ddp_buckets(t)
            assert sorted(set(b["step"])) == list(range(2, 2 + info["steps"]))
            for step, g in b.groupby("step"):
                assert g["elements"].tolist() == used, (t.path, step)
            assert set(b["dtype"]) == {"Float"} and set(b["group_size"]) == {info["ranks"]}
            c = collectives(t)
            # the c10d op on the main thread and gloo's record on its worker thread: one collective
            assert (c["source"] == "c10d::allreduce_+gloo:all_reduce").all()
            raw = _raw_events(t.path)
            assert len(c) == sum(e["name"] == "c10d::allreduce_" for e in raw) \
                == sum(e["name"] == "gloo:all_reduce" for e in raw)


@pytest.mark.parametrize("clock", ["step", "shared"])
def test_slowed_rank_is_the_straggler_of_most_steps(slow_job, clock):
    rep = rank_report(read_kineto_dir(slow_job), clock=clock)
    assert rep.ranks == [0, 1, 2] and rep.steps == [2, 3, 4, 5, 6] and rep.dropped == {}
    # a loaded CI machine once made rank 0 the busiest in one step of five (rank 1 still arrived last there)
    assert (rep.stragglers["straggler"] == 1).mean() >= 0.8, rep.stragglers
    # rank 1 arrives last at a step's collectives at least as often as any other rank; with two buckets a
    # step, a loaded machine tied it once (1 and 1), and a tie names the lower rank as ``most_last``
    assert rep.stragglers["last_arrivals"].map(lambda d: d.get(1, 0) == max(d.values())).all(), rep.stragglers
    assert (rep.stragglers["most_last"] == 1).mean() >= 0.8, rep.stragglers
    assert (rep.matches["last_rank"] == 1).mean() >= 0.8, rep.matches
    # a quarter of a core makes rank 1 far slower; a loaded CI machine slows the others too in some steps
    share = rep.stragglers["share"]
    assert (share > 0.05).all() and (share < 1).all() and share.median() > 0.2, share
    assert (rep.matches["skew"] >= 0).all() and rep.unmatched.empty


def test_sleepy_rank_is_the_straggler_too(sleepy_job):
    rep = rank_report(read_kineto_dir(sleepy_job))
    assert (rep.stragglers["straggler"] == 0).all(), rep.stragglers
    assert job_info(sleepy_job)["slow_by"] == "sleep"


def test_step_times_are_the_profiler_step_spans(slow_job):
    rep = rank_report(read_kineto_dir(slow_job))
    for r in rep.ranks:
        spans = _raw_steps(_raw_events(slow_job / f"rank{r}.json"))
        mine = rep.step_times[rep.step_times["rank"] == r]
        assert {s: (a, d) for s, a, d in zip(mine["step"], mine["start"], mine["dur"])} == spans
        assert ((mine["busy"] > 0) & (mine["busy"] <= mine["dur"])).all()
    assert (rep.stragglers["step_time"].to_numpy()
            == rep.step_times.groupby("step")["dur"].max().loc[rep.steps].to_numpy()).all()


_TRACES: dict[Path, list] = {}


def _traces(job: Path) -> list:
    if job not in _TRACES:
        _TRACES[job] = read_kineto_dir(job)
    return _TRACES[job]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_subset_and_order_matches_the_same_collectives(slow_job, data):
    traces = _traces(slow_job)
    full = rank_report(traces)
    chosen = data.draw(st.permutations(traces).flatmap(
        lambda p: st.integers(1, len(p)).map(lambda n: p[:n])), label="traces")
    rep = rank_report(chosen)
    key = ["step", "seq", "name", "group", "elements"]
    assert rep.matches[key].values.tolist() == full.matches[key].values.tolist()
    assert (rep.matches["skew"] >= 0).all() and (rep.matches["ranks"] == len(chosen)).all()
    assert rep.ranks == sorted(t.rank for t in chosen)
    # each rank's collective in exactly one match, none left over
    assert not rep.arrivals.duplicated(["match", "rank"]).any()
    per_rank = Counter(rep.arrivals["rank"])
    for t in chosen:
        c = collectives(t)
        assert per_rank[t.rank] == int(c["step"].isin(rep.steps).sum())
    # who came last among the chosen is who came last among them in the full report
    fa = full.arrivals[full.arrivals["rank"].isin(rep.ranks)]
    last = fa.sort_values(["match", "arrival", "rank"], ascending=[True, False, True]).drop_duplicates("match")
    assert rep.matches["last_rank"].tolist() == last["rank"].tolist()


def test_rank_from_file_name_and_duplicates(slow_job, tmp_path):
    folder = tmp_path / "named"
    folder.mkdir()
    for r in (0, 1, 2):
        doc = json.loads((slow_job / f"rank{r}.json").read_text())
        if r == 2:
            del doc["distributedInfo"]
        (folder / (f"worker-rank-{r}.pt.trace.json" if r == 2 else f"rank{r}.json")).write_text(json.dumps(doc))
    with pytest.warns(DlschedWarning, match="rank 2 taken from the file name"):
        rep = rank_report(read_kineto_dir(folder))
    assert rep.ranks == [0, 1, 2] and (rep.stragglers["straggler"] == 1).mean() >= 0.8
    shutil.copy(slow_job / "rank0.json", folder / "rank0-again.json")
    with pytest.raises(TraceError, match="both claim rank 0"):
        rank_report(read_kineto_dir(folder))


def test_steps_not_on_every_rank_are_dropped_and_named(slow_job, tmp_path):
    folder = tmp_path / "cut"
    folder.mkdir()
    for r in (0, 1, 2):
        doc = json.loads((slow_job / f"rank{r}.json").read_text())
        if r == 0:  # rank 0 lost its last step
            doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "ProfilerStep#6"]
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    with pytest.warns(DlschedWarning, match=r"rank 1: 6; rank 2: 6"):
        rep = rank_report(read_kineto_dir(folder))
    assert rep.steps == [2, 3, 4, 5] and rep.dropped == {1: [6], 2: [6]}
    doc = json.loads((slow_job / "rank1.json").read_text())
    for e in doc["traceEvents"]:  # rank 1 profiled other steps than rank 0
        if e.get("name", "").startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + 100}"
    (folder / "rank1.json").write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TraceError, match="no ProfilerStep was recorded by every rank"):
            rank_report([read_kineto(folder / "rank0.json"), read_kineto(folder / "rank1.json")])


def test_a_collective_missing_on_one_rank_is_unmatched_not_paired(slow_job, tmp_path):
    folder = tmp_path / "lost"
    folder.mkdir()
    for r in (0, 1, 2):
        doc = json.loads((slow_job / f"rank{r}.json").read_text())
        if r == 2:  # rank 2's trace lost the first bucket's all-reduce of step 3 (both of its records)
            step3 = next(e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#3")
            lo, hi = step3["ts"], step3["ts"] + step3["dur"]
            ops = [e for e in doc["traceEvents"] if e.get("name") in ("c10d::allreduce_", "gloo:all_reduce")]
            first = min(e["ts"] for e in ops if e["name"] == "c10d::allreduce_" and lo <= e["ts"] < hi)
            gone = [e for e in ops if first <= e["ts"] < hi
                    and e.get("args", {}).get("Input Dims", [[0]])[0] in ([[527114]], [527114])]
            assert len(gone) == 2
            doc["traceEvents"] = [e for e in doc["traceEvents"] if all(e is not g for g in gone)]
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    with pytest.warns(DlschedWarning, match="2 collectives of the compared steps were not found on every rank"):
        rep = rank_report(read_kineto_dir(folder))
    assert rep.unmatched[["rank", "step", "elements"]].values.tolist() == [[0, 3, 527114], [1, 3, 527114]]
    assert len(rep.matches) == 9 and (rep.stragglers["straggler"] == 1).mean() >= 0.8


def test_a_folder_of_traces_is_checked(tmp_path):
    with pytest.raises(TraceError, match="not a folder"):
        read_kineto_dir(tmp_path / "nowhere")
    with pytest.raises(TraceError, match="no trace files"):
        read_kineto_dir(tmp_path)
    (tmp_path / "rank0.json").write_text('{"traceEvents": [')
    with pytest.raises(TraceError, match="rank0.json"):
        read_kineto_dir(tmp_path)
