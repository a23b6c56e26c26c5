"""dlsched validate (DESIGN §4.7): the hook's recorded timeline, the comparison, and one small real cluster run."""
from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dlsched.analyses.multiworker_bounds import rate_ops, trace_frame
from dlsched.analyses.validate import (PredictedSample, add_ratio_intervals, fit_line, iteration_stats,
                                       observed_priorities, ratio_intervals,
                                       ratio_error_interval, ratio_interval, ratio_verdict, relative_error,
                                       sample_p95)
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
    # a busy CPU delays the small round trips in spells: the latency is the least of them, wherever it fell
    sizes = link_sizes(12.5e6)
    times = [{4096: 4e-3, 1250000: 0.1, 2500000: 0.2, 5000000: 0.4}[s] for s in sizes]
    times[-2] = 1e-4
    m = link_from_minima(LinkMeasurement(0, 0, "x", sizes, times))
    assert m.bandwidth == pytest.approx(12.5e6, rel=1e-6) and m.latency == pytest.approx(5e-5)
    assert max(len(run) for run in "".join("s" if s == 4096 else "b" for s in sizes).split("b")) == 3


TIMES = st.lists(st.floats(0.5, 2.0), min_size=5, max_size=30)


def _mean(xs):
    return sum(xs) / len(xs)


@settings(max_examples=40, deadline=None)
@given(TIMES, TIMES)
def test_ratio_interval_holds_the_point_estimate(base, times):
    lo, hi = ratio_interval(base, times)
    point = _mean(base) / _mean(times)
    assert lo <= hi
    assert lo - 1e-9 <= point <= hi + 1e-9


@settings(max_examples=40, deadline=None)
@given(TIMES, TIMES, TIMES, TIMES)
def test_ratio_error_interval_is_ordered(mb, m, pb, p):
    lo, hi = ratio_error_interval(mb, m, pb, p)
    assert lo <= hi


@settings(max_examples=30, deadline=None)
@given(st.floats(0.5, 2.0), st.floats(0.5, 2.0), st.integers(1, 30))
def test_identical_iterations_give_a_degenerate_interval(b, t, n):
    lo, hi = ratio_interval([b] * n, [t] * n)
    assert lo == pytest.approx(b / t, rel=1e-12) and hi == pytest.approx(b / t, rel=1e-12)
    elo, ehi = ratio_error_interval([b] * n, [t] * n, [b] * n, [t] * n)
    assert elo == pytest.approx(0, abs=1e-12) and ehi == pytest.approx(0, abs=1e-12)


def _around(centre, noise):
    """Iteration times within ±0.5% of ``centre``."""
    return [centre * (1 + 0.005 * e) for e in noise]


NOISE = st.lists(st.floats(-1, 1), min_size=40, max_size=40)


@settings(max_examples=20, deadline=None)
@given(NOISE, NOISE, NOISE, NOISE)
def test_verdict_within_for_a_matching_prediction(a, b, c, d):
    """Measured and predicted ratio 1.25 (each within 1.237…1.263): every resample's error is inside ±0.026."""
    err = ratio_error_interval(_around(1.0, a), _around(0.8, b), _around(1.0, c), _around(0.8, d))
    assert ratio_verdict(err) == "within"


@settings(max_examples=20, deadline=None)
@given(NOISE, NOISE, NOISE, NOISE, st.sampled_from([0.6, 1.0]))
def test_verdict_outside_for_a_wrong_prediction(a, b, c, d, predicted_order):
    """Measured ratio 1.25 against predicted 1.67 or 1.0: off by 0.2 or more in every resample."""
    err = ratio_error_interval(_around(1.0, a), _around(0.8, b), _around(1.0, c), _around(predicted_order, d))
    assert ratio_verdict(err) == "outside"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.5, 1.5), min_size=3, max_size=6))
def test_verdict_undecided_for_a_noisy_small_sample(base):
    """A prediction equal to the measurement, but a few iterations 0.5 s apart: the interval spans ±0.05."""
    assume(max(base) - min(base) >= 0.5)
    order = [0.8 * t for t in base]
    err = ratio_error_interval(base, order, base, order)
    assert err[0] < -0.05 and err[1] > 0.05 and ratio_verdict(err) == "undecided"


@pytest.mark.parametrize("interval, verdict", [
    ([-0.05, 0.05], "within"), ([0.0, 0.0], "within"), ([0.051, 0.3], "outside"), ([-0.3, -0.06], "outside"),
    ([0.04, 0.06], "undecided"), ([-0.1, 0.1], "undecided"), ([-0.06, 0.0], "undecided"),
    ([math.nan, math.nan], "undecided")])
def test_verdict_bounds(interval, verdict):
    assert ratio_verdict(interval) == verdict


def _loop_ratio_interval(base, times, level, resamples, seed):
    """The bootstrap written out: one resample at a time, the percentile by hand (linear, as numpy's)."""
    rng = np.random.default_rng(seed)
    bi = rng.integers(0, len(base), size=(resamples, len(base)))
    ti = rng.integers(0, len(times), size=(resamples, len(times)))
    ratios = []
    for r in range(resamples):
        b = sum(base[i] for i in bi[r]) / len(base)
        t = sum(times[i] for i in ti[r]) / len(times)
        ratios.append(b / t)
    ratios.sort()

    def pct(q):
        pos = q / 100 * (len(ratios) - 1)
        k = math.floor(pos)
        return ratios[k] + (pos - k) * (ratios[min(k + 1, len(ratios) - 1)] - ratios[k])
    return [pct(50 * (1 - level)), pct(50 * (1 + level))]


def test_bootstrap_equals_the_loop():
    base, times = [1.0, 1.3, 0.9, 1.1, 1.05], [0.8, 0.7, 0.95, 0.82]
    for level, resamples, seed in ((0.95, 200, 0), (0.9, 101, 7)):
        assert ratio_interval(base, times, level, resamples, seed) == pytest.approx(
            _loop_ratio_interval(base, times, level, resamples, seed), rel=1e-12)
    pb, pt = [1.0, 1.2, 0.95], [0.7, 0.75, 0.72, 0.71]
    rng = np.random.default_rng(3)
    m = [(sum(base[i] for i in bi) / 5) / (sum(times[i] for i in ti) / 4)
         for bi, ti in zip(rng.integers(0, 5, size=(50, 5)), rng.integers(0, 4, size=(50, 4)))]
    p = [(sum(pb[i] for i in bi) / 3) / (sum(pt[i] for i in ti) / 4)
         for bi, ti in zip(rng.integers(0, 3, size=(50, 3)), rng.integers(0, 4, size=(50, 4)))]
    assert ratio_error_interval(base, times, pb, pt, 0.95, 50, 3) == pytest.approx(
        list(np.percentile([b - a for a, b in zip(m, p)], [2.5, 97.5])), rel=1e-12)


def _loop_ratio_intervals(mb, m, pb, p, resamples, seed):
    """:func:`ratio_intervals` written out: per resample, each predicted iteration weighted by hand by how often
    its draw, its calibration round and its paired measured iteration were drawn."""
    rng = np.random.default_rng(seed)
    bi = rng.integers(0, len(mb), size=(resamples, len(mb)))
    ti = rng.integers(0, len(m), size=(resamples, len(m)))
    pbi = rng.integers(0, len(pb.times), size=(resamples, len(pb.times)))
    pti = rng.integers(0, len(p.times), size=(resamples, len(p.times)))
    rounds = {n: rng.integers(0, n, size=(resamples, n)) for n in sorted({s.n_rows for s in (pb, p) if s.rows})}

    def mean(sample, draws, r):
        total = weight_sum = 0.0
        for i, x in enumerate(sample.times):
            w = 1.0 if sample.pairs else float(list(draws[r]).count(i))
            if sample.rows:
                w *= list(rounds[sample.n_rows][r]).count(sample.rows[i])
            if sample.pairs:
                w *= list(bi[r]).count(sample.pairs[i])
            total, weight_sum = total + w * x, weight_sum + w
        return total / weight_sum
    errs = []
    for r in range(resamples):
        measured = (sum(mb[i] for i in bi[r]) / len(mb)) / (sum(m[i] for i in ti[r]) / len(m))
        errs.append(mean(pb, pbi, r) / mean(p, pti, r) - measured)
    return list(np.percentile(errs, [2.5, 97.5]))


def test_weighted_bootstrap_equals_the_loop():
    mb, m = [1.0, 1.3, 0.9, 1.1], [0.8, 0.7, 0.95]
    # every (round, pair) once, and each round's iterations many: no resample draws none of them
    pb = PredictedSample([1.02, 1.25, 0.93, 1.12, 1.0, 1.3, 0.88, 1.1, 1.05, 1.28, 0.9, 1.15],
                         rows=[r for r in range(3) for _ in range(4)], n_rows=3, pairs=[0, 1, 2, 3] * 3)
    p = PredictedSample([0.8 + 0.01 * i for i in range(15)], rows=[i % 3 for i in range(15)], n_rows=3)
    for seed in (0, 5):
        assert ratio_intervals(mb, m, pb, p, 0.95, 60, seed)["error"] == pytest.approx(
            _loop_ratio_intervals(mb, m, pb, p, 60, seed), rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=5, max_size=20), st.floats(-0.2, 0.2))
def test_pairing_takes_the_shared_orders_luck_out_of_the_error(base, offset):
    """A prediction that is each measured baseline iteration's own time plus a constant: paired, the error's
    interval is a point; drawn alone, it is as wide as the iterations' spread makes it."""
    assume(max(base) - min(base) >= 0.3)
    pb = [t + offset for t in base]
    order = [0.5] * len(base)
    paired = ratio_intervals(base, order, PredictedSample(pb, pairs=list(range(len(base)))), order)["error"]
    alone = ratio_intervals(base, order, pb, order)["error"]
    assert paired[1] - paired[0] == pytest.approx(0, abs=1e-9) and paired[0] == pytest.approx(2 * offset)
    assert alone[1] - alone[0] > 0.1


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=8, max_size=8))
def test_calibration_rounds_widen_the_predicted_interval(levels):
    """An order predicted from 8 calibration rounds that disagree by up to ±10%: resampling the rounds
    widens the predicted ratio's interval beyond the simulator's own (iterations drawn alone)."""
    assume(max(levels) - min(levels) >= 0.5)
    rows = [r for r in range(8) for _ in range(10)]
    times = [0.8 * (1 + 0.1 * levels[r]) for r in rows]
    base = [1.0] * 20
    wide = ratio_intervals(base, base, base, PredictedSample(times, rows=rows, n_rows=8))["predicted"]
    narrow = ratio_intervals(base, base, base, times)["predicted"]
    assert wide[1] - wide[0] > 1.5 * (narrow[1] - narrow[0])


def test_ratio_intervals_on_every_order_but_the_baseline():
    rows = {"random": {"measured_ratio": 1.0}, "tac": {}}
    add_ratio_intervals(rows, {"random": ([1.0, 1.1, 0.9], [1.0, 1.05]), "tac": ([0.8, 0.85, 0.75], [0.8, 0.82])})
    assert rows["random"] == {"measured_ratio": 1.0}
    tac = rows["tac"]
    assert set(tac) == {"measured_ratio_ci", "predicted_ratio_ci", "ratio_error_ci", "ratio_verdict"}
    assert all(len(tac[k]) == 2 and tac[k][0] <= tac[k][1] for k in ("measured_ratio_ci", "predicted_ratio_ci",
                                                                       "ratio_error_ci"))
    assert tac["ratio_verdict"] == ratio_verdict(tac["ratio_error_ci"])
    json.dumps(rows)  # --json emits them as they are


def _report_row(mean, **ratio):
    return {"measured_mean": mean, "predicted_mean": mean, "mean_error": 0.0, "measured_p95": mean,
            "predicted_p95": mean, "p95_error": 0.0, "measured_straggler": 0.05, "predicted_straggler": 0.04,
            "measured_efficiency": 0.8, "predicted_efficiency": 0.8, "measured_outside_bounds": 0,
            "measured_model_error": 0.0, "trace_efficiency": 0.8, "iterations": 20, **ratio}


def _report_out(orders: dict, worst_ratio_error: float) -> dict:
    """What :func:`dlsched.answers.validate.report` returns, around the given rows besides random's."""
    return {
        "model": "m", "mode": "inference", "workers": 2, "servers": 1, "batch": 8, "hosts": {"note": "netns"},
        "cpu": "x", "sharing": "fair", "bounds": {"upper": 1.0, "lower": 0.5, "speedup": 2.0},
        "oracle": {"compute_per_worker_s": 0.1, "compute": "c", "compute_beside_transfers": "f",
                   "compute_crowding": "1.00 cores' worth of other load", "bandwidth_bytes_per_s": 12.5e6,
                   "latency_s": 1e-4, "transfers": "t"},
        "ratio_interval": {"level": 0.95, "resamples": 2000, "target": 0.05},
        "orders": {"random": _report_row(1.0, measured_ratio=1.0, predicted_ratio=1.0, ratio_error=0.0), **orders},
        "link_models": {"fair": {"max_abs_mean_error": 0.0, "mean_abs_mean_error": 0.0,
                                 "max_abs_ratio_error": worst_ratio_error}},
        "replay_fit": {"slope": -1.0, "intercept": 2.0, "r2": 0.9, "points": 40}}


@pytest.mark.parametrize("verdict, phrase", [
    ("outside", "outside the ±0.05 target"), ("within", "within the ±0.05 target"),
    ("undecided", "undecided: the interval spans the ±0.05 target; more --iterations narrow it")])
def test_render_shows_the_intervals_and_the_verdict(monkeypatch, verdict, phrase):
    from rich.console import Console

    from dlsched.cli import validate_views
    buf = io.StringIO()
    monkeypatch.setattr(validate_views, "console", Console(file=buf, width=200, highlight=False))
    tac = _report_row(0.62, measured_ratio=1.613, predicted_ratio=1.748, ratio_error=0.135,
                      measured_ratio_ci=[1.55, 1.67], predicted_ratio_ci=[1.71, 1.79], ratio_error_ci=[0.07, 0.2],
                      ratio_verdict=verdict)
    validate_views.render(_report_out({"tac": tac}, 0.135))
    text = buf.getvalue()
    assert "95% interval" in text and "[1.55, 1.67]" in text and "[1.71, 1.79]" in text and "[+0.07, +0.20]" in text
    assert (f"tac/random: predicted 1.748, measured 1.613, error +0.135 (95% interval +0.07 … +0.20): {phrase}"
            in text.splitlines())
    assert not any(line.startswith("random/random") for line in text.splitlines())
    assert "compute crowding" in text and "1.00 cores' worth of other load" in text


@pytest.mark.parametrize("tic, warned", [(0.94, True), (0.99, False)])
def test_render_shows_the_simulator_on_its_own_calibration_iterations(monkeypatch, tic, warned):
    from rich.console import Console

    from dlsched.analyses.validate import calibration_check
    from dlsched.cli import validate_views
    buf = io.StringIO()
    monkeypatch.setattr(validate_views, "console", Console(file=buf, width=200, highlight=False))
    check = calibration_check((1.50, 1.49), (1.00, tic))
    validate_views.render({**_report_out({}, 0.0), "calibration_check": check})
    line = next(x for x in buf.getvalue().splitlines() if x.startswith("the simulator on this job's calibration"))
    assert f"TIC/unordered ratio error {check['ratio_error']:+.3f}" in line
    assert ("beyond ±0.05" in line) == warned == check["beyond_target"]


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
    tac = d["orders"]["tac"]
    lo, hi = tac["measured_ratio_ci"]
    assert lo - 1e-9 <= tac["measured_ratio"] <= hi + 1e-9
    assert len(tac["predicted_ratio_ci"]) == len(tac["ratio_error_ci"]) == 2
    assert tac["ratio_verdict"] in ("within", "outside", "undecided") and "ratio_error_ci" not in d["orders"]["random"]
    assert 0.9 * 12.5e6 <= d["oracle"]["bandwidth_bytes_per_s"] <= 1.1 * 12.5e6
    crowd = d["oracle"]["crowd"]  # what 1 or 2 workers computing at once make of an op, from the load measured
    assert len(crowd) == 2 and crowd[1] == 1.0 and 0 < crowd[0] <= 1.0 and d["oracle"]["background_cores"] >= 0
    c = d["calibration_check"]  # the calibrated simulator on the job's own unscored calibration iterations
    for k in ("unordered", "tic"):
        assert c[k]["measured"] > 0 and c[k]["predicted"] > 0 and abs(c[k]["error"]) <= 0.30, c
    assert c["ratio_error"] == pytest.approx(c["unordered"]["predicted"] / c["tic"]["predicted"]
                                             - c["unordered"]["measured"] / c["tic"]["measured"])
    assert (tmp_path / "v.png").stat().st_size > 0
    per_worker, per_it = rate_ops(trace_frame(d["traces"]["tac"]))
    assert len(per_it) == 3


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=60), st.integers(1, 30), st.integers(0, 99))
def test_sample_p95_is_the_mean_p95_of_short_runs(values, n, seed):
    """The predicted p95 is the statistic a run of n iterations shows: the vectorised draw equals a plain loop."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(50, n))
    plain = sum(float(np.percentile([values[i] for i in row], 95)) for row in idx) / 50
    assert sample_p95(values, n, resamples=50, seed=seed) == pytest.approx(plain, rel=1e-12)
    assert min(values) - 1e-9 <= sample_p95(values, n, resamples=50, seed=seed) <= max(values) + 1e-9


def test_sample_p95_of_20_iterations_sits_below_the_95th_percentile():
    """A skewed distribution: 20 iterations show a lower p95 than 400 do, which the prediction must match."""
    times = np.random.default_rng(1).lognormal(0.0, 0.3, 400)
    assert sample_p95(times, 20) < 0.95 * float(np.percentile(times, 95))
