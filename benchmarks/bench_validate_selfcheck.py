"""The calibrated simulator on a ``validate`` job's own calibration iterations, and where TAC's time goes (issue 33).

Beside a busy loop ``validate`` predicted TAC 4–6% fast in training. Per job
(``run_validation`` at the CLI's defaults, ``random,tac``; vgg_mid and the
transformer in training, once quiet and once beside a busy loop on one core):

- the calibration check (``oracle.check``, what ``validate`` prints): the
  simulator's error on the unordered and the TIC calibration iterations,
  beside its error on the scored random and TAC ones;
- TAC's busy compute before and after each worker's last parameter arrived,
  measured and in the simulator's schedule of the same iterations (medians
  over workers and iterations): which part of the step the miss is in;
- each worker's compute cut at its waits (:mod:`dlsched.analyses.compute_segments`):
  wall time over the simulator's op times (the profile at the calibrated
  level) between waits and after the last wait, in the calibration iterations
  and the scored ones: whether the compute runs at one level wherever it falls,
  as the simulator has it;
- what a calibration fitted to the calibration iterations' mean times would
  predict: the compute level and the slow-down beside transfers ``f`` set so
  that the simulator reproduces the unordered and the TIC calibration means
  (secant on the level, bisection on ``f``). ``validate`` does not do this
  (docs/validate.md: the predicted gain would restate the measured one); it
  is here to show how much of the miss those two numbers can absorb.

Writes ``benchmarks/results/validate_selfcheck.json`` and ``.md``. Needs root
(network namespaces). Run under ``flock /tmp/dlsched-heavy.lock``.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
from bench_validate import BATCH, MODELS  # noqa: E402
from bench_validate_calibration import run_and_report  # noqa: E402
from bench_validate_defaults import HOG  # noqa: E402

PARTS = ("vgg_mid/training", "transformer/training")
FIT_ITERATIONS = 100


def _mean(v, graph, times: dict, scale: float, overlap: float, priorities, factors, sent) -> float:
    from dlsched.analyses.validate import predict_iterations
    t = dict(times)
    for o in graph.compute_ops():
        t[o.name] *= scale
    return float(predict_iterations(graph, t, v.workers, priorities, FIT_ITERATIONS, "fair", factors, 0,
                                    overlap=overlap, sent=sent).per_iteration["iteration_time"].mean())


def fit_to_means(predict_u, predict_e, u: float, e: float, hi: float = 4.0) -> tuple[float, float]:
    """``(scale, f)`` at which ``predict_u(scale, f) = u`` and ``predict_e(scale, f) = e`` (bisection on f)."""
    def scale_for(f):
        s0, p0 = 1.0, predict_u(1.0, f)
        s1 = u / p0
        for _ in range(6):
            p1 = predict_u(s1, f)
            if abs(p1 - u) <= 1e-5 * u or p1 == p0:
                break
            s0, p0, s1 = s1, p1, max(s1 + (u - p1) * (s1 - s0) / (p1 - p0), 1e-3)
        return s1
    lo, f_hi = 1.0, hi
    if predict_e(scale_for(lo), lo) >= e:
        return scale_for(lo), lo
    for _ in range(8):
        mid = 0.5 * (lo + f_hi)
        if predict_e(scale_for(mid), mid) < e:
            lo = mid
        else:
            f_hi = mid
    f = 0.5 * (lo + f_hi)
    return scale_for(f), f


def late_split(v, run) -> dict:
    """TAC's busy compute before and after the last arrival: measured, and in the simulator's schedule."""
    from dlsched.analyses.multiworker import run_workers
    from dlsched.analyses.simulate import compile_graph, transfer_ranks
    from dlsched.analyses.validate import observed_priorities
    from dlsched.dag import RECV
    from dlsched.timeline import compute_spans
    o = v.oracle
    sg = compile_graph(o.graph, o.times)
    comp = [i for i in range(sg.n) if sg.resources[sg.res[i]].startswith("compute")]
    recv = [i for i in range(sg.n) if sg.kinds[i] == RECV]
    m_pre, m_post, s_pre, s_post = [], [], [], []
    for rs in run.timeline.by_iteration().values():
        rs = sorted(rs, key=lambda r: r.worker)
        ranks = [transfer_ranks(sg, observed_priorities(r), 0, "canonical") for r in rs]
        start, end = run_workers(sg, [sg.dur] * len(rs), ranks, list(range(len(rs))), "fair", overlap=o.overlap)
        for w, r in enumerate(rs):
            la, spans = r.last_arrival, compute_spans(r)
            m_pre.append(sum(max(0.0, min(b, la) - a) for a, b in spans))
            m_post.append(sum(max(0.0, b - max(a, la)) for a, b in spans))
            sla = max(end[w][i] for i in recv)
            s_pre.append(sum(max(0.0, min(end[w][i], sla) - start[w][i]) for i in comp))
            s_post.append(sum(max(0.0, end[w][i] - max(start[w][i], sla)) for i in comp))
    med = statistics.median
    return {"measured_before": med(m_pre), "measured_after": med(m_post), "simulated_before": med(s_pre),
            "simulated_after": med(s_post)}


def one(part: str, hog: bool) -> dict:
    from dlsched.analyses.compute_segments import slowdowns
    from dlsched.analyses.validate import observed_priorities
    from dlsched.jobs import in_situ_oracle as iso
    from dlsched.jobs import validate_run as vr
    from dlsched.machine import cpu_model
    model, mode = part.split("/")
    saved: dict = {}
    calibrate = iso.InSituOracle.calibrate

    def keep(self, unordered, enforced):  # the profile's times and the calibration's records, then calibrate
        saved.update(times=dict(self.times), unordered=unordered, enforced=enforced)
        calibrate(self, unordered, enforced)
    iso.InSituOracle.calibrate = keep
    busy = subprocess.Popen([sys.executable, "-c", HOG]) if hog else None
    try:
        v = vr.run_validation(MODELS[model], mode=mode, batch=BATCH[(model, mode)], orders=("random", "tac"))
    finally:
        iso.InSituOracle.calibrate = calibrate
        if busy is not None:
            busy.kill()
            busy.wait()
    o = v.oracle
    measured = {n: statistics.fmean(m["iteration_time"] for m in r.measured) for n, r in v.runs.items()}
    predicted = {n: float(r.predicted["fair"].per_iteration["iteration_time"].mean()) for n, r in v.runs.items()}
    check = o.check["fair"]
    # the same calibration, then level and f fitted to the calibration means (from the busy fit's level)
    base = {k: val * (1.0 if k not in {c.name for c in o.graph.compute_ops()} else o.scale)
            for k, val in saved["times"].items()}
    sent_u = [[observed_priorities(r) for r in sorted(g, key=lambda r: r.worker)] for g in saved["unordered"]]
    tic = next(iter(saved["enforced"]))  # any TIC record's sent order is the TIC order
    tic_prios = observed_priorities(tic[0])
    fu, fe = o.factors["unordered"], o.factors["enforced"]
    scale, f = fit_to_means(lambda s, ov: _mean(v, o.graph, base, s, ov, None, fu, sent_u),
                            lambda s, ov: _mean(v, o.graph, base, s, ov, tic_prios, fe, None),
                            check["unordered"][0], check["tic"][0])
    sent_r = [[observed_priorities(r) for r in sorted(rs, key=lambda r: r.worker)]
              for rs in v.runs["random"].timeline.by_iteration().values()]
    fitted = {"random": _mean(v, o.graph, base, scale, f, None, fu, sent_r),
              "tac": _mean(v, o.graph, base, scale, f, v.runs["tac"].priorities, fe, None)}
    groups = {"unordered calibration": saved["unordered"], "TIC calibration": saved["enforced"],
              **{n: list(r.timeline.by_iteration().values()) for n, r in v.runs.items()}}
    segments = {k: slowdowns(o.graph, o.times, [r for rs in g for r in rs]) for k, g in groups.items()}
    return {"part": part, "hog": hog, "cpu": cpu_model(), "rate": v.hosts["rate"], "f": o.overlap,
            "measured": measured, "predicted": predicted, "check": check, "late": late_split(v, v.runs["tac"]),
            "fit": {"scale": scale, "f": f, "predicted": fitted}, "segments": segments}


def report(runs: list) -> str:
    from dlsched.machine import cpu_model

    def err(p, m):
        return f"{p / m - 1:+.1%}"

    def ratio(d, m):
        return d["random"] / d["tac"] - m["random"] / m["tac"]
    lines = ["# The calibrated simulator on its own calibration iterations, and where TAC's time goes", "",
             f"CPU: {cpu_model()}. `run_validation(MODEL, mode='training', batch=B, orders=('random', 'tac'))`, "
             "the defaults otherwise; one job quiet and one beside a busy loop per model. Errors: predicted over "
             "measured mean, less 1; ratio: TAC/random (TIC/unordered for the check), predicted less measured.", "",
             "| model | machine | f | check: unordered, TIC, ratio | scored: random, TAC, ratio "
             "| TAC busy before / after the last arrival: measured, simulated (s) "
             "| fitted to the calibration means: level (over the busy fit's), f; random, TAC, ratio |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        c, m, p, late, fit = r["check"], r["measured"], r["predicted"], r["late"], r["fit"]
        lines.append(
            f"| {r['part']} | {'busy loop' if r['hog'] else 'quiet'} | x{r['f']:.3f} "
            f"| {err(c['unordered'][1], c['unordered'][0])}, {err(c['tic'][1], c['tic'][0])}, "
            f"{c['unordered'][1] / c['tic'][1] - c['unordered'][0] / c['tic'][0]:+.3f} "
            f"| {err(p['random'], m['random'])}, {err(p['tac'], m['tac'])}, {ratio(p, m):+.3f} "
            f"| {late['measured_before']:.3f} / {late['measured_after']:.3f}, "
            f"{late['simulated_before']:.3f} / {late['simulated_after']:.3f} "
            f"| x{fit['scale']:.3f}, x{fit['f']:.2f}; {err(fit['predicted']['random'], m['random'])}, "
            f"{err(fit['predicted']['tac'], m['tac'])}, {ratio(fit['predicted'], m):+.3f} |")
    lines += ["", "Compute cut at the waits (`analyses/compute_segments.py`): wall time over the simulator's op times "
              "(1 = the calibrated level), between waits / after the last wait; in brackets the profiled seconds "
              "between waits over all the iterations (the rest ran after the last wait).", "",
              "| model | machine | unordered calibration | TIC calibration | random | TAC |", "|---|---|---|---|---|---|"]

    def seg(d):
        x = lambda v: "–" if v is None else f"x{v:.2f}"  # noqa: E731
        return f"{x(d['between_waits'])} / {x(d['after_last_wait'])} ({d['between_work_s']:.1f} s)"
    for r in runs:
        sg = r.get("segments")
        if sg:
            lines.append(f"| {r['part']} | {'busy loop' if r['hog'] else 'quiet'} | "
                         + " | ".join(seg(sg[k]) for k in ("unordered calibration", "TIC calibration", "random", "tac"))
                         + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    return run_and_report("validate_selfcheck", lambda: [one(part, hog) for hog in (False, True) for part in PARTS],
                          report)


if __name__ == "__main__":
    sys.exit(main())
