"""dlsched validate (DESIGN §4.7): the hook's recorded timeline, the comparison, and one small real cluster run."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.multiworker_bounds import rate_ops, trace_frame
from dlsched.analyses.validate import fit_line, iteration_stats, observed_priorities, relative_error
from dlsched.jobs.validate_run import pick_rate
from dlsched.profiling.link import link_from_minima, link_sizes
from dlsched.profiling.network import LinkMeasurement
from dlsched.runtime import netns
from dlsched.timeline import IterationRecord, Timeline, compute_spans
from tests.conftest import assert_clean_error, run_cli

REPO = Path(__file__).resolve().parents[1]
SMALL = "examples/torch_models.py:small_cnn"


def _record(worker, it, t0, arrive=0.1):
    return IterationRecord(worker, it, t0, t0 + arrive, t0 + 0.5, {"a": t0 + arrive, "b": t0 + 0.3},
                           {"a": 0, "b": 0}, {0: ["a", "b"]}, t0 + 0.4, {"a": t0, "b": t0 + 0.1},
                           {"a": [t0 + 0.4, t0 + 0.45]}, [[t0 + 0.2, t0 + 0.3]])


def test_timeline_frame_is_the_simulator_schema_and_rates():
    tl = Timeline([_record(w, it, it * 1.0) for it in range(3) for w in range(2)])
    f = tl.frame(skip=1)
    assert set(f["iteration"]) == {1, 2}
    assert set(f["kind"]) == {"recv", "send", "compute"}
    assert f["start"].min() == 0.0 and (f["end"] >= f["start"]).all()
    comp = f[(f.kind == "compute") & (f.worker == 0) & (f.iteration == 1)]
    assert [(round(a, 6), round(b, 6)) for a, b in zip(comp.start, comp.end)] == [(0.1, 0.2), (0.3, 0.4)]
    per_worker, per_it = rate_ops(f)
    assert len(per_it) == 2 and (per_it["efficiency"].dropna().between(0, 1)).all()


def test_trace_round_trip(tmp_path):
    from dlsched.formats.chrome_trace import write_chrome_trace
    tl = Timeline([_record(w, 0, 0.0) for w in range(2)])
    write_chrome_trace(tl.frame(), tmp_path / "t.json")
    back = trace_frame(tmp_path / "t.json")
    assert len(back) == len(tl.frame()) and set(back["kind"]) == {"recv", "send", "compute"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 3)), max_size=6), st.floats(0, 2), st.floats(0, 10))
def test_compute_spans_are_disjoint_and_inside(stalls, start, length):
    r = IterationRecord(0, 0, 0.0, start, start + length + 1, compute_end=start + length,
                        stalls=[[a, a + d] for a, d in stalls])
    spans = compute_spans(r)
    for a, b in spans:
        assert start <= a < b <= start + length
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))
    covered = sum(b - a for a, b in spans)
    assert covered <= length + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=3, max_size=30), st.floats(-2, 2), st.floats(-1, 1))
def test_fit_line_r2_at_most_one(xs, slope, intercept):
    f = fit_line(xs, [slope * x + intercept + 0.01 * math.sin(i) for i, x in enumerate(xs)])
    assert math.isnan(f["r2"]) or f["r2"] <= 1 + 1e-9


def test_small_figures():
    assert iteration_stats([2.0])["p95"] == 2.0 and relative_error(0.9, 1.0) == pytest.approx(-0.1)
    assert observed_priorities(_record(0, 0, 0.0)) == {"a": 0, "b": 1}
    assert pick_rate(0.5, 62.5e6, 2) == "2000mbit"
    m = link_from_minima(LinkMeasurement(0, 0, "x", link_sizes(12.5e6), [3e-3, 1e-4, 2e-3, 0.1, 0.2, 0.4]))
    assert m.bandwidth == pytest.approx(12.5e6, rel=1e-6) and m.latency == pytest.approx(5e-5)


@pytest.mark.parametrize("args, phrase", [
    (["--orders", "random,bogus"], "--orders"),
    (["--rate", "fast", "--orders", "tac,tac"], "--orders"),
    (["--rate", "fast"], "--rate"),
    (["--iterations", "1000000000"], "validate would take about 6,000,000,018 real iterations"),
    (["--iterations", "400", "--max-work", "1000"], "above the limit of 1,000 set by --max-work"),
])
def test_bad_input_exits_2_before_any_process(args, phrase):
    assert_clean_error(run_cli("validate", SMALL, *args, timeout=120), phrase)


def test_not_a_torch_model_exits_2():
    assert_clean_error(run_cli("validate", "tests/no_such_model.onnx", timeout=120))


@pytest.mark.skipif(netns.available(), reason="as root --network netns works; this checks the refusal without it")
def test_netns_without_root_exits_2():
    assert_clean_error(run_cli("validate", SMALL, "--network", "netns", "--rate", "1gbit", timeout=120), "root")


@pytest.mark.skipif(not netns.available(), reason="needs root with ip and tc (network namespaces, tc-shaped link)")
def test_small_real_cluster_predicted_within_30_percent(tmp_path):
    """2 workers + 1 server in network namespaces, small CNN, 2 orders; the tight figures live in the benchmark."""
    out = subprocess.run(
        [sys.executable, "-m", "dlsched.cli.main", "validate", SMALL, "--rate", "100mbit", "--orders", "random,tac",
         "--iterations", "3", "--warmup", "1", "--batch", "4", "--json", "--trace-out", str(tmp_path / "tr"),
         "--plot", str(tmp_path / "v.png")],
        capture_output=True, text=True, timeout=170, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads(out.stdout)
    assert d["hosts"]["kind"] == "netns" and set(d["orders"]) == {"random", "tac"}
    for name, row in d["orders"].items():
        assert abs(row["mean_error"]) <= 0.30, (name, row)
        assert row["iterations"] == 3
    assert 0.9 * 12.5e6 <= d["oracle"]["bandwidth_bytes_per_s"] <= 1.1 * 12.5e6
    assert (tmp_path / "v.png").stat().st_size > 0
    per_worker, per_it = rate_ops(trace_frame(d["traces"]["tac"]))
    assert len(per_it) == 3
