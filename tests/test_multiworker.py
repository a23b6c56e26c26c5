"""The multi-worker simulator (DESIGN §4.6): golden outputs, an exact reference simulator, link policies.

``tests/multiworker_golden.json`` holds what ``simulate_workers`` returned
before its loop was rewritten around link-sharing policies (issue 14, item 7):
the rewrite must reproduce it bit for bit. Regenerate it only for an intended
change of the model, with ``python -m tests.test_multiworker --record``.
(Issue 11 re-recorded the efficiencies alone — multi-worker bounds, the
workers' own E, model errors — with every time and order unchanged; then the
timelines alone, once they kept every iteration rather than the first, whose
rows were checked to match the old digests.)
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.analyses import multiworker
from dlsched.analyses.links import LINK_POLICIES, FairShareLink, LinkPolicy, SerialLink
from dlsched.analyses.multiworker import simulate_workers
from dlsched.errors import DlschedError
from dlsched.synthetic import random_dag

GOLDEN = Path(__file__).with_name("multiworker_golden.json")

# (n_compute, n_params, training, ps, seed, integer_times, share of ops given zero time)
DAGS = [
    (1, 1, False, 1, 0, False, 0.0),
    (5, 3, True, 1, 1, True, 0.0),
    (12, 6, True, 2, 2, False, 0.0),
    (20, 8, True, 3, 3, True, 0.0),
    (30, 10, True, 2, 4, False, 0.0),
    (40, 16, True, 2, 5, False, 0.0),
    (25, 0, True, 1, 6, False, 0.0),
    (15, 12, False, 3, 7, True, 0.0),
    (60, 20, True, 2, 8, True, 0.0),
    (8, 5, True, 2, 9, False, 0.3),
    (10, 4, True, 1, 10, True, 0.3),
    (150, 40, True, 2, 11, False, 0.0),
    (100, 30, True, 3, 12, True, 0.0),
]
#: Small, so that the progress callback also reports during an iteration.
PROGRESS_EVERY = 7


def dag(spec):
    n_compute, n_params, training, ps, seed, integer, zero = spec
    g, t = random_dag(n_compute, n_params, training=training, ps=ps, seed=seed, integer_times=integer)
    rng = random.Random(seed)
    return g, {k: (0.0 if rng.random() < zero else v) for k, v in sorted(t.items())}


def priorities(g, style: int):
    """A strict order, an order with ties, or priorities on some transfers only."""
    names = [r.name for r in g.recvs()]
    rng = random.Random(style)
    if style % 3 == 0:
        rng.shuffle(names)
        return {n: i for i, n in enumerate(names)}
    if style % 3 == 1:
        return {n: rng.randint(0, 2) for n in names}
    return {n: rng.randint(0, 5) for n in names if rng.random() < 0.5}


def cases():
    """Every DAG under both sharing modes, enforced and random orders, jitter 0 and 0.1;
    workers 1–8 and iterations 1–3 cycle so that every value meets every mode."""
    out = []
    c = 0
    for d in range(len(DAGS)):
        for sharing in ("serial", "fair"):
            for enforced in (True, False):
                for jitter in (0.0, 0.1):
                    for rep in range(2):
                        out.append({"dag": d, "sharing": sharing, "enforced": enforced, "jitter": jitter,
                                    "workers": 1 + (c * 3 + d) % 8, "iterations": 1 + (c + rep) % 3,
                                    "seed": c, "keep_timeline": c % 5 != 4})
                        c += 1
    return out


def digest(values) -> str:
    return hashlib.sha256(" ".join(float(v).hex() for v in values).encode()).hexdigest()[:20]


def observe(case, monkeypatch=None) -> dict:
    """Run one case; everything ``simulate_workers`` reports, the progress calls, and a
    digest of every iteration's start and end times (from ``run_workers``)."""
    g, t = dag(DAGS[case["dag"]])
    runs = []
    core = multiworker.run_workers

    def recording(sg, durs, ranks, turn, sharing, progress=None):
        start, end = core(sg, durs, ranks, turn, sharing, progress)
        runs.append(digest(v for w in range(len(durs)) for v in start[w] + end[w]))
        return start, end

    saved = multiworker.run_workers, multiworker.PROGRESS_EVERY
    multiworker.run_workers, multiworker.PROGRESS_EVERY = recording, PROGRESS_EVERY
    try:
        calls = []
        r = simulate_workers(g, t, workers=case["workers"],
                             priorities=priorities(g, case["seed"]) if case["enforced"] else None,
                             iterations=case["iterations"], seed=case["seed"], jitter=case["jitter"],
                             sharing=case["sharing"], keep_timeline=case["keep_timeline"],
                             progress=lambda done, total: calls.append([done, total]))
    finally:
        multiworker.run_workers, multiworker.PROGRESS_EVERY = saved
    pw, pi = r.per_worker, r.per_iteration
    tl = None
    if r.timeline is not None:
        tl = {"rows": len(r.timeline), "ops": hashlib.sha256("|".join(
            f"{w},{o},{k},{res}" for w, o, k, res in r.timeline[["worker", "op", "kind", "resource"]].itertuples(
                index=False)).encode()).hexdigest()[:20],
              "times": digest(list(r.timeline["start"]) + list(r.timeline["end"]) + list(r.timeline["priority"]))}
    return {
        "makespan": [float(v).hex() for v in pw["makespan"]],
        "efficiency": digest(pw["efficiency"]), "model_error": digest(pw["model_error"]), "wait": digest(pw["wait"]),
        "worker": pw["worker"].tolist(), "iteration": pw["iteration"].tolist(),
        "iteration_time": [float(v).hex() for v in pi["iteration_time"]],
        "straggler_share": [float(v).hex() for v in pi["straggler_share"]],
        "iteration_efficiency": [float(v).hex() for v in pi["efficiency"]],
        "summary": hashlib.sha256(json.dumps(r.summary(), sort_keys=True).encode()).hexdigest()[:20],
        "progress": {"calls": len(calls), "first": calls[:3], "last": calls[-1:],
                     "all": hashlib.sha256(repr(calls).encode()).hexdigest()[:20]},
        "runs": runs, "timeline": tl,
    }


#: The benchmark's graph (5,000 ops, two servers): long runs where fair sharing's float arithmetic accumulates.
LARGE = [{"sharing": s, "workers": w, "jitter": j} for s in ("serial", "fair") for w in (3, 8) for j in (0.0, 0.1)]


def observe_large(case) -> str:
    """Digest of ``run_workers``' start and end times on the benchmark graph, random orders."""
    import numpy as np

    from dlsched.analyses.simulate import compile_graph, transfer_ranks

    g, t = random_dag(2237, 250, training=True, ps=2, seed=0)
    sg = compile_graph(g, t)
    w = case["workers"]
    rng = np.random.default_rng(w)
    noise = rng.lognormal(-case["jitter"] ** 2 / 2, case["jitter"], size=(w, sg.n)) if case["jitter"] else 1.0
    durs = (np.asarray(sg.dur)[None, :] * np.ones((w, 1)) * noise).tolist()
    ranks = [transfer_ranks(sg, None, seed=k) for k in range(w)]
    start, end = multiworker.run_workers(sg, durs, ranks, [(k + 1) % w for k in range(w)], case["sharing"])
    return digest(v for k in range(w) for v in start[k] + end[k])


def record() -> None:
    lines = [json.dumps({"case": c, "observed": observe(c)}, separators=(",", ":")) for c in cases()]
    lines += [json.dumps({"large": c, "observed": observe_large(c)}, separators=(",", ":")) for c in LARGE]
    GOLDEN.write_text("[\n" + ",\n".join(lines) + "\n]\n")


def golden():
    return json.loads(GOLDEN.read_text())


def test_golden_outputs_are_reproduced_exactly():
    small = [g for g in golden() if "case" in g]
    assert [g["case"] for g in small] == cases()
    for g in small:
        assert observe(g["case"]) == g["observed"], g["case"]


def test_golden_long_runs_are_reproduced_exactly():
    large = [g for g in golden() if "large" in g]
    assert [g["large"] for g in large] == LARGE
    for g in large:
        assert observe_large(g["large"]) == g["observed"], g["large"]




# -- an exact reference simulator ---------------------------------------------------

def reference_workers(sg, durs, ranks, turn, sharing, overlap=1, crowd=None):
    """Decision-point simulation of ``W`` workers straight from the model, in exact arithmetic.

    At each instant: the ops with no work left end and release their
    successors; every idle queue (a worker's compute resource; a link stream:
    one per link for ``serial``, one per worker for ``fair``) starts its best
    ready op — transfers by (rank, worker turn, index), everything else by
    (ready time, worker turn, index); then time moves to the next end, with
    the ``m`` transfers in flight on a link each progressing at rate ``1/m``.
    Durations are taken as exact fractions, so no rounding decides a tie.
    A compute op that starts while its worker has a transfer on a link (one
    started at the same instant included) takes ``overlap`` times its time,
    and one that starts while ``k`` workers compute (likewise) ``crowd[k - 1]`` times on top.
    """
    from fractions import Fraction

    n, W = sg.n, len(durs)
    on_link = [not r.startswith("compute") for r in sg.resources]

    def queue(op):
        w, i = op
        k = sg.res[i]
        return ("link", k, w if sharing == "fair" else 0) if on_link[k] else ("compute", w, k)

    def key(op):
        w, i = op
        if sg.kinds[i] == "recv" and on_link[sg.res[i]]:
            return (ranks[w][i], turn[w], i)
        return (ready_at[op], turn[w], i)

    preds = {(w, i): sg.indeg[i] for w in range(W) for i in range(n)}
    ready_at = {op: Fraction(0) for op, c in preds.items() if c == 0}
    waiting = set(ready_at)
    running, left, start, end = {}, {}, {}, {}
    t = Fraction(0)
    while True:
        for q, op in list(running.items()):
            if left[op] == 0:
                end[op] = t
                del running[q], left[op]
                w, i = op
                for j in sg.succ[i]:
                    preds[(w, j)] -= 1
                    if preds[(w, j)] == 0:
                        ready_at[(w, j)] = t
                        waiting.add((w, j))
        if len(end) == W * n:
            break
        by_queue = {}
        for op in waiting:
            by_queue.setdefault(queue(op), []).append(op)
        new = []
        for q, ops in by_queue.items():
            if q not in running:
                op = min(ops, key=key)
                waiting.discard(op)
                running[q], start[op] = op, t
                new.append((q, op))
        computing = {o[0] for p, o in running.items() if p[0] == "compute"}
        for q, op in new:
            d = Fraction(durs[op[0]][op[1]])
            if q[0] == "compute" and any(p[0] == "link" and o[0] == op[0] for p, o in running.items()):
                d *= Fraction(overlap)
            if q[0] == "compute" and crowd is not None:
                d *= Fraction(crowd[len(computing) - 1])
            left[op] = d
        if any(left[op] == 0 for op in running.values()):
            continue  # zero-time ops end at this instant, before time moves on
        assert running, "stalled"
        sharers = {}
        for q in running:
            if q[0] == "link":
                sharers[q[1]] = sharers.get(q[1], 0) + 1
        rate = {op: Fraction(1, sharers[q[1]]) if q[0] == "link" else 1 for q, op in running.items()}
        dt = min(left[op] / rate[op] for op in running.values())
        for op in running.values():
            left[op] -= dt * rate[op]
        t += dt
    return ([[float(start[(w, i)]) for i in range(n)] for w in range(W)],
            [[float(end[(w, i)]) for i in range(n)] for w in range(W)])


def core_inputs(gt, workers, seed, integer, zero):
    """Per-worker durations (integers, or the oracle's floats with jitter), orders and turns."""
    from dlsched.analyses.simulate import compile_graph, transfer_ranks

    graph, times = gt
    sg = compile_graph(graph, times)
    rng = random.Random(seed)
    if integer:  # integer seconds: sums are exact in floats, so ties are real ties
        durs = [[0.0 if rng.random() < zero else float(round(d * 1e4) + rng.randint(0, 2)) for d in sg.dur]
                for _ in range(workers)]
    else:
        durs = [[0.0 if rng.random() < zero else d * rng.lognormvariate(0, 0.1) for d in sg.dur]
                for _ in range(workers)]
    if rng.random() < 0.5:  # enforced: one order, with ties, for every worker
        prio = {r.name: rng.randint(0, 3) for r in graph.recvs()}
        ranks = [transfer_ranks(sg, prio, seed, "canonical")] * workers
    else:
        ranks = [transfer_ranks(sg, None, rng.randrange(2**31)) for _ in range(workers)]
    turn = list(range(workers))
    rng.shuffle(turn)
    return sg, durs, ranks, turn


small_dags = st.builds(
    lambda n, p, training, ps, seed, integer: random_dag(n, p, training=training, ps=ps, seed=seed,
                                                         integer_times=integer),
    st.integers(1, 10), st.integers(0, 6), st.booleans(), st.integers(1, 2), st.integers(0, 10**6), st.booleans())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_dags, st.data(), st.integers(0, 10**6), st.sampled_from([0.0, 0.3]))
def test_exact_agreement_with_the_reference_where_floats_are_exact(gt, data, seed, zero):
    """Integer times: serial links (any W) and fair links with W ≤ 2 (rates 1 and 1/2) round
    nothing, so the simulator must match the exact reference to the bit, ties included."""
    sharing = data.draw(st.sampled_from(["serial", "fair"]))
    workers = data.draw(st.integers(1, 5 if sharing == "serial" else 2))
    sg, durs, ranks, turn = core_inputs(gt, workers, seed, integer=True, zero=zero)
    assert multiworker.run_workers(sg, durs, ranks, turn, sharing) == reference_workers(sg, durs, ranks, turn,
                                                                                         sharing)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_dags, st.data(), st.integers(0, 10**6), st.sampled_from([1.5, 2.0]))
def test_compute_beside_transfers_slows_as_the_reference(gt, data, seed, overlap):
    """Compute that starts beside its worker's own transfer takes ``overlap`` times its time: the
    simulator agrees with the exact reference to the bit (integer times, halves stay exact)."""
    sharing = data.draw(st.sampled_from(["serial", "fair"]))
    workers = data.draw(st.integers(1, 4 if sharing == "serial" else 2))
    sg, durs, ranks, turn = core_inputs(gt, workers, seed, integer=True, zero=0.0)
    got = multiworker.run_workers(sg, durs, ranks, turn, sharing, overlap=overlap)
    assert got == reference_workers(sg, durs, ranks, turn, sharing, overlap)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_dags, st.data(), st.integers(0, 10**6), st.sampled_from([1.0, 1.5]), st.sampled_from([0.5, 0.75]))
def test_crowded_compute_runs_as_the_reference(gt, data, seed, overlap, alone):
    """Compute that starts while ``k`` workers compute takes ``crowd[k − 1]`` times its time (on top of
    ``overlap`` beside transfers): the simulator agrees with the exact reference to the bit."""
    sharing = data.draw(st.sampled_from(["serial", "fair"]))
    workers = data.draw(st.integers(1, 4 if sharing == "serial" else 2))
    sg, durs, ranks, turn = core_inputs(gt, workers, seed, integer=True, zero=0.0)
    crowd = [alone] * (workers - 1) + [1.0]  # binary fractions: the products stay exact
    got = multiworker.run_workers(sg, durs, ranks, turn, sharing, overlap=overlap, crowd=crowd)
    assert got == reference_workers(sg, durs, ranks, turn, sharing, overlap, crowd)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_dags, st.sampled_from(["serial", "fair"]), st.integers(1, 6), st.integers(0, 10**6),
       st.sampled_from([0.0, 0.3]))
def test_agreement_with_the_exact_reference(gt, sharing, workers, seed, zero):
    """Jittered float times, any W: the same schedule up to rounding."""
    sg, durs, ranks, turn = core_inputs(gt, workers, seed, integer=False, zero=zero)
    start, end = multiworker.run_workers(sg, durs, ranks, turn, sharing)
    ref_start, ref_end = reference_workers(sg, durs, ranks, turn, sharing)
    for got, ref in ((start, ref_start), (end, ref_end)):
        for w in range(workers):
            for a, b in zip(got[w], ref[w]):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15), (w, got[w], ref[w])


# -- link policies ------------------------------------------------------------------

def test_registry_and_public_constants():
    assert multiworker.SHARING == ("serial", "fair") == tuple(LINK_POLICIES)
    assert LINK_POLICIES == {"serial": SerialLink, "fair": FairShareLink}
    for name, policy in LINK_POLICIES.items():
        link = policy(3)
        assert isinstance(link, LinkPolicy) and link.name == name
        assert all(0 <= link.stream(w) < link.streams for w in range(3))


def test_fair_share_settles_work_only_when_its_transfers_change():
    link = FairShareLink(3)
    link.admit(0.0, 0, 3.0)
    assert link.ends(0.0) == [(3.0, 0)]
    link.admit(1.0, 1, 1.0)  # 2 s of work left for transfer 0, now at half rate
    assert sorted(link.ends(1.0)) == [(3.0, 1), (5.0, 0)]
    link.finish(3.0, 1)  # transfer 0 did 1 s of work meanwhile and is alone again
    assert link.left == {0: 1.0} and link.ends(3.0) == [(4.0, 0)]
    link.finish(4.0, 0)
    assert link.ends(4.0) == []


class Unshared(FairShareLink):
    """A link of unlimited capacity: every worker's stream at full rate (a model for the test only)."""

    name = "unshared"

    def rate(self) -> float:
        return 1.0


def test_a_new_link_model_is_a_new_policy(monkeypatch):
    """The loop takes any registered policy; with unshared links every worker runs as if alone."""
    from dlsched.analyses.simulate import compile_graph, run_compiled, transfer_ranks

    monkeypatch.setitem(LINK_POLICIES, "unshared", Unshared)
    g, t = random_dag(40, 16, training=True, ps=2, seed=5)
    sg = compile_graph(g, t)
    ranks = [transfer_ranks(sg, None, seed=w) for w in range(4)]
    start, end = multiworker.run_workers(sg, [sg.dur] * 4, ranks, [0, 1, 2, 3], "unshared")
    for w in range(4):
        assert (start[w], end[w]) == run_compiled(sg, ranks[w])
    r = simulate_workers(g, t, workers=3, priorities={x.name: 0 for x in g.recvs()}, sharing="unshared")
    assert r.sharing == "unshared" and (r.per_iteration["straggler_share"] == 0).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_dags, st.sampled_from(["serial", "fair"]), st.sampled_from(["tic", "tac", "topo"]))
def test_one_worker_is_the_single_worker_simulation(gt, sharing, algo):
    """``simulate_workers`` at W = 1 is ``simulate``, op for op: one worker alone on every link under
    any sharing model, its order enforced (run_compiled is the one-worker fast path of run_workers)."""
    from dlsched.analyses.orders import compute_order
    from dlsched.analyses.simulate import simulate

    g, t = gt
    order = compute_order(g, algo, t)
    one = simulate(g, t, order)
    r = simulate_workers(g, t, workers=1, priorities=order, sharing=sharing)
    tl = r.timeline.set_index("op")
    assert tl.loc[one.names, "start"].tolist() == one.starts.tolist()
    assert tl.loc[one.names, "end"].tolist() == one.ends.tolist()
    assert r.per_iteration["iteration_time"].iloc[0] == one.makespan


def test_unknown_sharing_is_refused():
    g, t = random_dag(3, 1, seed=0)
    with pytest.raises(DlschedError, match="serial, fair"):
        simulate_workers(g, t, sharing="tcp")


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        record()
