"""Multi-worker bounds and efficiency (DESIGN §4.6, issue 11): E is never negative, W = 1 is TicTac §3.2,
a trace rated by ``bounds --trace`` gives the simulator's own figures back."""
from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses.bounds import bounds, schedule_efficiency
from dlsched.analyses.links import LINK_POLICIES
from dlsched.analyses.multiworker import simulate_workers
from dlsched.analyses.multiworker_bounds import busy_time, multiworker_bounds, rate, rate_ops, rate_trace
from dlsched.analyses.simulate import simulate
from dlsched.answers.options import ModelSpec, OracleSpec, OrderChoice
from dlsched.answers.simulate import Run
from dlsched.answers.simulate import simulate as simulate_answer
from dlsched.formats.chrome_trace import write_chrome_trace
from dlsched.synthetic import random_dag
from tests.conftest import assert_clean_error, run_cli

DAG = st.tuples(st.integers(1, 25), st.integers(0, 8), st.booleans(), st.integers(1, 3), st.integers(0, 10**6),
                st.booleans())


def _dag(spec):
    n, p, training, ps, seed, integer = spec
    return random_dag(n, p, training=training, ps=ps, seed=seed, integer_times=integer)


def _priorities(g, seed):
    import random

    names = [r.name for r in g.recvs()]
    random.Random(seed).shuffle(names)
    return {n: i for i, n in enumerate(names)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DAG, st.integers(1, 8), st.sampled_from(sorted(LINK_POLICIES)), st.booleans(), st.sampled_from([0.0, 0.2]),
       st.integers(1, 2), st.integers(0, 1000))
def test_simulated_iterations_lie_within_the_multi_worker_bounds(spec, workers, sharing, enforced, jitter,
                                                                  iterations, seed):
    """Acceptance 1: every simulated iteration of W ≤ 8 workers has 0 ≤ E_W ≤ 1, under every link model;
    a worker's own E is in [0, 1] where given, always given under fair sharing, and never below its L."""
    g, t = _dag(spec)
    r = simulate_workers(g, t, workers=workers, priorities=_priorities(g, seed) if enforced else None,
                         iterations=iterations, seed=seed, jitter=jitter, sharing=sharing, keep_timeline=False)
    pi, pw = r.per_iteration, r.per_worker
    assert (pi["model_error"] == 0).all(), pi
    assert pi["efficiency"].between(0, 1).all(), pi
    assert (pi["lower"] <= pi["iteration_time"] * (1 + 1e-9)).all()
    assert (pi["iteration_time"] <= pi["upper"] * (1 + 1e-9)).all()
    rated = pw["efficiency"].dropna()
    assert rated.between(0, 1).all()
    assert (pw["model_error"] >= 0).all()  # a worker is never faster than its busiest resource
    assert (pw["efficiency"].isna() == (pw["model_error"] != 0)).all()
    if sharing == "fair" or workers == 1:  # a worker's own stream never carries another's transfer
        assert (pw["model_error"] == 0).all(), pw
    if jitter == 0 and sharing in ("serial", "fair"):  # work-conserving links: the oracle's U_W, L_W are realised
        assert pi["upper"].tolist() == pytest.approx([r.upper] * iterations)
        assert pi["lower"].tolist() == pytest.approx([r.lower] * iterations)


@settings(max_examples=25, deadline=None)
@given(DAG, st.integers(0, 1000))
def test_one_worker_is_tictac_section_3_2(spec, seed):
    """W = 1: U_W, L_W, E_W and the worker's own E all equal TicTac's U, L and E of the makespan."""
    g, t = _dag(spec)
    b, one = bounds(g, t), multiworker_bounds(g, t, 1)
    assert (one.upper, one.lower, one.speedup) == (b.upper, b.lower, b.speedup)
    prio = _priorities(g, seed)
    m = simulate(g, t, prio).makespan
    r = simulate_workers(g, t, workers=1, priorities=prio, iterations=2)
    e = schedule_efficiency(b.upper, b.lower, m)
    assert r.per_iteration["efficiency"].tolist() == pytest.approx([e, e], abs=1e-9)
    assert r.per_worker["efficiency"].tolist() == pytest.approx([e, e], abs=1e-9)
    assert r.per_iteration["upper"].tolist() == pytest.approx([b.upper] * 2)
    assert r.per_iteration["lower"].tolist() == pytest.approx([b.lower] * 2)
    assert rate(m, b.upper, b.lower).efficiency == pytest.approx(min(1.0, max(0.0, e)))


@settings(max_examples=25, deadline=None)
@given(DAG, st.integers(2, 8))
def test_multi_worker_bounds_count_every_resource(spec, workers):
    """U_W = Σ of all loads = W·U; L_W = max(C, W·load_k) for identical workers."""
    g, t = _dag(spec)
    b, bw = bounds(g, t), multiworker_bounds(g, t, workers)
    assert bw.upper == pytest.approx(workers * b.upper)
    compute = max((v for k, v in b.loads.items() if k.startswith("compute")), default=0.0)
    links = max((v for k, v in b.loads.items() if not k.startswith("compute")), default=0.0)
    assert bw.lower == pytest.approx(max(compute, workers * links))
    assert len(bw.loads) == workers * sum(k.startswith("compute") for k in b.loads) + sum(
        not k.startswith("compute") for k in b.loads)


def test_a_time_outside_the_bounds_is_a_model_error_with_its_size():
    above, below, inside = rate(5.0, 4.0, 2.0), rate(1.5, 4.0, 2.0), rate(2.0, 4.0, 2.0)
    assert (above.efficiency, above.model_error, above.relative_error) == (None, 1.0, 0.25)
    assert (below.efficiency, below.model_error, below.relative_error) == (None, -0.5, -0.25)
    assert (inside.efficiency, inside.model_error, inside.relative_error) == (1.0, 0.0, 0.0)
    assert rate(3.0, 3.0, 3.0).efficiency == 1.0
    assert busy_time([]) == 0.0 and busy_time([(0.0, 1.0), (0.0, 1.0)]) == 1.0


def test_fair_links_count_their_busy_time_once():
    """Two workers' transfers overlap on a fair link: each takes 2 s on the wire, the link is busy 2 s."""
    f = pd.DataFrame({"worker": [0, 0, 1, 1], "kind": ["recv", "compute"] * 2,
                      "resource": ["ps:0/down", "compute:0"] * 2, "start": [0.0, 2.0, 0.0, 2.0],
                      "end": [2.0, 3.0, 2.0, 3.0], "iteration": [4] * 4})
    pw, pi = rate_ops(f)
    # iteration: compute 1 + 1, link busy 2 → U_W = 4, L_W = 2, T = 3
    assert pi[["iteration", "upper", "lower", "iteration_time", "efficiency"]].values.tolist() == [[4, 4, 2, 3, .5]]
    # each worker: 2 s on the wire + 1 s compute → U_w = 3 = m_w, E_w = 0
    assert pw["efficiency"].tolist() == [0.0, 0.0] and pw["model_error"].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("sharing", ["serial", "fair"])
def test_a_trace_rated_gives_the_simulators_own_figures(tmp_path, sharing):
    """Several iterations written as one trace (iterations back to back) and read back by rate_trace."""
    g, t = random_dag(40, 10, training=True, ps=2, seed=7)
    frames, expect = [], []
    offset = 0.0
    for it, seed in enumerate((1, 2)):
        r = simulate_workers(g, t, workers=3, iterations=1, seed=seed, sharing=sharing, jitter=0.1)
        tl = r.timeline.assign(iteration=it, start=r.timeline["start"] + offset, end=r.timeline["end"] + offset)
        offset = float(tl["end"].max()) + 0.5
        frames.append(tl)
        expect.append(r)
    path = tmp_path / "run.json"
    write_chrome_trace(pd.concat(frames, ignore_index=True), path, model=g.name)
    rated = rate_trace(path, g, t)
    for it, r in enumerate(expect):
        pi = rated.per_iteration.iloc[it]
        assert pi["iteration_time"] == pytest.approx(r.per_iteration["iteration_time"][0], abs=1e-8)
        assert pi["efficiency"] == pytest.approx(r.per_iteration["efficiency"][0], abs=1e-6)
        assert pi["straggler_share"] == pytest.approx(r.per_iteration["straggler_share"][0], abs=1e-6)
        pw = rated.per_worker[rated.per_worker["iteration"] == it]
        assert pw["makespan"].tolist() == pytest.approx(r.per_worker["makespan"].tolist(), abs=1e-8)
        assert pw["efficiency"].fillna(-1).tolist() == pytest.approx(
            r.per_worker["efficiency"].fillna(-1).tolist(), abs=1e-6)
    assert rated.per_iteration["predicted_efficiency"].between(0, 1).all()


def test_bounds_trace_round_trip_through_the_cli(tmp_path):
    """simulate --trace-out, then bounds --trace (no MODEL): the simulator's makespans, E and straggler share,
    iteration by iteration."""
    from tests.test_simulate_cli import _save

    g, t = random_dag(30, 8, training=True, ps=2, seed=3)
    dag, oracle = _save(tmp_path, "net", g, t)
    trace = tmp_path / "t.json"
    sim = run_cli("simulate", dag, "--oracle", oracle, "--workers", "4", "--iterations", "3", "--sharing", "fair",
                  "--trace-out", trace, "--json")
    assert sim.returncode == 0, sim.stderr
    sim = json.loads(sim.stdout)
    proc = run_cli("bounds", "--trace", trace, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["per_iteration"]) == len(sim["per_iteration"]) == 3
    for it, want in zip(out["per_iteration"], sim["per_iteration"]):
        assert it["iteration_time"] == pytest.approx(want["iteration_time"], abs=1e-8)
        assert it["efficiency"] == pytest.approx(want["efficiency"], abs=1e-6)
        assert it["straggler_share"] == pytest.approx(want["straggler_share"], abs=1e-6)
    rows = sorted(out["per_worker"], key=lambda r: (r["iteration"], r["worker"]))
    assert [r["makespan"] for r in rows] == pytest.approx(
        [m for want in sim["per_iteration"] for m in want["makespans"]], abs=1e-8)
    assert [r["efficiency"] for r in rows] == pytest.approx(
        [e for want in sim["per_iteration"] for e in want["efficiencies"]], abs=1e-6)
    text = run_cli("bounds", "--trace", trace)
    assert text.returncode == 0 and "per worker" in text.stdout and "E_W" in text.stdout
    with_model = json.loads(run_cli("bounds", dag, "--oracle", oracle, "--trace", trace, "--json").stdout)
    assert with_model["trace"]["predicted_efficiency"]["mean"] == pytest.approx(
        sum(i["efficiency"] for i in sim["per_iteration"]) / 3, abs=1e-6)


def test_bounds_trace_refuses_what_it_cannot_rate(tmp_path):
    foreign = tmp_path / "kineto.json"
    foreign.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 5}]}))
    assert_clean_error(run_cli("bounds", "--trace", foreign), "args.kind")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"ph": "X", "name": "x", "ts": 0, "dur": 5,
                                "args": {"kind": "recv", "worker": -1, "resource": "ps:0/down"}}]))
    assert_clean_error(run_cli("bounds", "--trace", bad), "args.worker")
    proc = run_cli("bounds")
    assert proc.returncode == 2 and "--trace alone" in proc.stderr


NUMBER = re.compile(r"(?<![\w.])[-−]\d")


def _efficiencies(stdout: str) -> list[float]:
    """Every figure printed in an efficiency row or column (E, E_W, own E, efficiency)."""
    lines = stdout.splitlines()
    out = []
    header = None
    for line in lines:
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if not cells:
            continue
        if any("efficiency" in c or re.fullmatch(r"(own )?E(_W)?", c) for c in cells) and not any(
                re.fullmatch(r"-?\d+\.\d+", c) for c in cells):
            header = cells
            continue
        if len(cells) == 2 and "efficiency" in cells[0]:
            out.append(float(cells[1].split()[0]))
        elif header and len(cells) == len(header):
            for h, c in zip(header, cells):
                if ("efficiency" in h or re.fullmatch(r"(own )?E(_W)?", h)) and not c.startswith("—") and c:
                    out.append(float(c))
    return out


@pytest.mark.parametrize("sharing", ["serial", "fair"])
def test_simulate_four_workers_compared_prints_no_negative_efficiency(tmp_path, sharing):
    """Acceptance 1, as a user sees it: simulate --workers 4 --compare tac,random."""
    from tests.test_simulate_cli import _save

    g, t = random_dag(60, 14, training=True, ps=2, seed=21)
    dag, oracle = _save(tmp_path, "net", g, t)
    proc = run_cli("simulate", dag, "--oracle", oracle, "--workers", "4", "--iterations", "3", "--compare",
                   "tac,random", "--sharing", sharing)
    assert proc.returncode == 0, proc.stderr
    effs = _efficiencies(proc.stdout)
    assert len(effs) >= 1 + 4 + 2, proc.stdout  # the run, each worker that has one, each order
    assert all(0 <= e <= 1 for e in effs), proc.stdout
    assert not NUMBER.search(proc.stdout), proc.stdout
    out = json.loads(run_cli("simulate", dag, "--oracle", oracle, "--workers", "4", "--iterations", "3",
                             "--compare", "tac,random", "--sharing", sharing, "--json").stdout)
    assert 0 <= out["efficiency"] <= 1 and 0 <= out["dependency_efficiency"] <= 1
    assert all(0 <= r["efficiency"] <= 1 for r in out["compare"])
    assert all(r["efficiency"] is None or 0 <= r["efficiency"] <= 1 for r in out["per_worker"])
    assert not math.isnan(out["efficiency"])


def test_the_simulate_report_rates_jittered_runs_within_zero_and_one():
    g, t = random_dag(30, 8, training=True, seed=4)
    r = simulate_answer(ModelSpec.of(g), OracleSpec.of(t), OrderChoice("tac", seed=2),
                        Run(workers=1, iterations=4, jitter=0.5, compare=["random", "tic"]))
    effs = [r.figures["efficiency"], r.figures["dependency_efficiency"]] + [c["efficiency"]
                                                                            for c in r.figures["compare"]]
    assert all(0 <= e <= 1 for e in effs), effs
