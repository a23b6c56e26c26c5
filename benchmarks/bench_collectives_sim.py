"""eager-SGD's experiments replayed by the all-reduce simulator (issue 12, acceptance 1–3; DESIGN §4.8).

``dlsched simulate --step-time`` replays the paper's §7 settings without a
model, each over several seeds (the random draws: delayed processes,
majority's initiators); figures are the median over seeds with the spread
(min–max; mean):

1. Fig. 9 micro-benchmark: 32 processes linearly skewed 1–32 ms, 64
   iterations, an all-reduce of ≤ 0.2 ms. A barrier per iteration (the
   micro-benchmark re-skews every iteration); the free-running figures are
   shown beside.
2. §7.2.1 hyperplane regression: 8 processes, step e = 0.41 s (3.8 × 0.64
   steps/s), one random process delayed D ∈ {200, 300, 400} ms per step,
   free-running, at 64, 256 and 1,024 steps (gated at 256).
3. §7.2.3 severe rotating imbalance: 8 processes, delays 50–400 ms shifted by
   one process every step, e = 0.41 s, free-running, 256 steps.

A target the faithful timing model misses is reported FAIL with its reason;
the model is not tuned towards the paper's numbers. Writes
``benchmarks/results/collectives_sim.{md,json}``.

Run: ``python benchmarks/bench_collectives_sim.py [--seeds N]``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dlsched.machine import cpu_model, load_averages  # noqa: E402

from dlsched.answers.collectives import Comparison, Network, Step, collectives  # noqa: E402
from dlsched.answers.options import ModelSpec, OracleSpec  # noqa: E402

ALL = ["allreduce", "solo", "majority"]
E = 0.41
GRAD = 8192 * 4  # the hyperplane model's 8,192 float32 weights
MICRO_NET = {"latency": 2e-6, "bandwidth": 1.25e9, "gradient_bytes": 1024}  # ring over 32: 0.126 ms


def replay(kinds, processes: int, iterations: int, imbalance: str | None = None, *, step_time: float,
           gradient_bytes: int = 0, latency: float | None = None, bandwidth: float | None = None,
           activation: str = "free-running", seed: int = 0) -> dict:
    """The collectives answer on a step of ``step_time`` seconds (no model)."""
    return collectives(ModelSpec(None), OracleSpec(None),
                       Comparison(kinds, processes, iterations, imbalance, activation, seed),
                       Step(step_time, gradient_bytes), Network(latency, bandwidth))


def over_seeds(seeds, **kw) -> list[dict]:
    return [replay(ALL, seed=s, **kw)["collectives"] for s in seeds]


def stat(values) -> dict:
    values = list(values)
    return {"median": statistics.median(values), "mean": statistics.fmean(values), "min": min(values),
            "max": max(values)}


def fmt(s: dict, digits: int = 3) -> str:
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f}; mean {s['mean']:.{digits}f})"


def check(rows: list, name: str, value: dict, ok: bool, target: str, why: str = "") -> None:
    rows.append({"check": name, "simulated": value, "target": target, "pass": bool(ok), "why": "" if ok else why})


def micro(seeds) -> tuple[list, dict]:
    rows, figs = [], {}
    for activation in ("barrier", "free-running"):
        runs = over_seeds(seeds, processes=32, iterations=64, imbalance="skew:linear:1ms:32ms", step_time=1e-6,
                          activation=activation, **MICRO_NET)
        lat = {k: stat(r[k]["mean_latency_s"] * 1e3 for r in runs) for k in ALL}
        nap = {k: stat(r[k]["mean_nap"] for r in runs) for k in ALL}
        figs[activation] = {"latency_ms": lat, "nap": nap,
                            "sync_over_majority": stat(r["allreduce"]["mean_latency_s"] / r["majority"]
                                                       ["mean_latency_s"] for r in runs),
                            "sync_over_solo": stat(r["allreduce"]["mean_latency_s"] / r["solo"]["mean_latency_s"]
                                                   for r in runs)}
    allreduce_ms = replay(["allreduce"], 32, 1, step_time=1e-6, **MICRO_NET)["allreduce_s"] * 1e3
    f = figs["barrier"]
    # Majority's figures hang on 64 random initiators per run: the checks take the mean over the seeds.
    nap_m = f["nap"]["majority"]["mean"]
    check(rows, "1 NAP solo (barrier)", f["nap"]["solo"], f["nap"]["solo"]["max"] == 1.0, "exactly 1.00")
    check(rows, "1 NAP majority, mean over seeds (barrier)", f["nap"]["majority"], abs(nap_m - 16) <= 1.5, "16 ± 1.5")
    want = 15.5 + allreduce_ms
    check(rows, "1 sync latency ms (barrier)", f["latency_ms"]["allreduce"],
          abs(f["latency_ms"]["allreduce"]["median"] / want - 1) <= 0.01, f"{want:.3f} ms ± 1%")
    med = {k: f["latency_ms"][k]["mean"] for k in ALL}
    order = med["solo"] < med["majority"] < med["allreduce"]
    check(rows, "1 latency ms solo < majority < sync (barrier; majority shown)", f["latency_ms"]["majority"], order,
          "solo<maj<sync")
    ratio = med["allreduce"] / med["majority"]
    f["sync_over_mean_majority"] = ratio
    check(rows, "1 sync / mean majority latency (barrier)", {"median": ratio, "mean": ratio, "min": ratio,
                                                            "max": ratio}, 1.8 <= ratio <= 3.0, "[1.8, 3.0] (paper 2.46)")
    check(rows, "1 sync/solo (barrier)", f["sync_over_solo"], f["sync_over_solo"]["min"] >= 20, "≥ 20 (paper 53.32)")
    fr = figs["free-running"]
    check(rows, "1 sync/majority (free-running, not gated)", fr["sync_over_majority"], True, "shown for reference")
    figs["allreduce_ms"] = allreduce_ms
    return rows, figs


def hyperplane(seeds) -> tuple[list, dict]:
    rows, figs = [], {}
    paper = {200: 1.50, 300: 1.75, 400: 2.01}
    for steps in (64, 256, 1024):
        for D, target in paper.items():
            runs = over_seeds(seeds, processes=8, iterations=steps, imbalance=f"random:k=1:delay={D}ms",
                              step_time=E, gradient_bytes=GRAD)
            period = stat(1 / r["allreduce"]["steps_per_s"] for r in runs)
            solo = stat(r["solo"]["speedup"] for r in runs)
            maj_solo = stat(r["majority"]["steps_per_s"] / r["solo"]["steps_per_s"] for r in runs)
            figs[f"{steps}/{D}"] = {"sync_period_s": period, "solo_speedup": solo, "majority_over_solo": maj_solo,
                                    "solo_staleness": stat(r["solo"]["mean_staleness"] for r in runs),
                                    "solo_nap": stat(r["solo"]["mean_nap"] for r in runs),
                                    "majority_nap": stat(r["majority"]["mean_nap"] for r in runs)}
            if steps != 256:
                continue
            check(rows, f"2 sync period s, D={D} ms", period, abs(period["median"] / (E + D / 1e3) - 1) <= 0.01,
                  f"{E + D / 1e3:.2f} s ± 1%")
            check(rows, f"2 solo speedup, D={D} ms", solo, abs(solo["median"] / target - 1) <= 0.06,
                  f"{target} ± 6%", why=LAG_WHY)
            if D == 200:
                check(rows, "2 majority/solo throughput, D=200 ms", maj_solo, abs(maj_solo["median"] - 0.84) <= 0.06,
                      "0.84 ± 0.06")
    return rows, figs


LAG_WHY = ("free-running: a process delayed at its step keeps its lag (it takes the result and goes on, the paper's "
           "semantics), so solo's front runner is itself delayed in about 1 step of 10 and solo's period is "
           "e + 0.09·D, not e; the target (e + D)/e is the lock-step reference below, where a late process's "
           "unfinished delay is dropped")


def rotate(seeds) -> tuple[list, dict]:
    rows = []
    runs = over_seeds(seeds, processes=8, iterations=256, imbalance="rotate:50ms:400ms", step_time=E,
                      gradient_bytes=GRAD)
    maj = stat(r["majority"]["speedup"] for r in runs)
    stale = {k: stat(r[k]["mean_staleness"] for r in runs) for k in ALL}
    missed = {k: stat(r[k]["missed_rate"] for r in runs) for k in ALL}
    figs = {"majority_speedup": maj, "solo_speedup": stat(r["solo"]["speedup"] for r in runs),
            "staleness": stale, "missed_rate": missed, "nap": {k: stat(r[k]["mean_nap"] for r in runs) for k in ALL}}
    check(rows, "3 majority speedup", maj, abs(maj["median"] - 1.29) <= 0.08, "1.29 ± 0.08",
          why="free-running: majority's period is e + 0.31 s, not e + 0.225 s (the initiator's mean delay): a "
              "process that missed a collective starts its next step late, so the next initiator carries part of "
              "its previous delay; the target is the lock-step reference below (1.28)")
    ratio = stale["solo"]["median"] / max(stale["majority"]["median"], 1e-12)
    check(rows, "3 staleness solo / majority", {"median": ratio, "mean": ratio, "min": ratio, "max": ratio}, ratio >= 3, "≥ 3",
          why="solo's stale gradients are 1 step old, not more: every process has the same mean delay over a "
              "rotation, so no lag accumulates; the ratio is then about (1 − NAP_solo/P)/(1 − NAP_majority/P) "
              "= 0.81/0.43 ≈ 1.9")
    m_s, m_m = missed["solo"]["median"], missed["majority"]["median"]
    check(rows, "3 missed updates solo / majority", missed["solo"], m_s >= 10 * m_m and m_s > 0, "≥ 10×")
    return rows, figs


def lock_step(spec: str, seeds, steps: int = 256) -> dict:
    """Reference only, not a model of real processes: every process starts step j when collective j−1 ends,
    even one still sleeping (its unfinished delay is dropped). The issue's targets of 2 and 3 follow from it."""
    from dlsched.analyses.allreduce_sim import majority_initiators
    from dlsched.analyses.imbalance import parse_imbalance

    speed = {k: [] for k in ALL}
    for seed in seeds:
        _, d = parse_imbalance(spec).draw(8, steps, seed)
        init = majority_initiators(8, steps, seed)
        for k in ALL:
            t = 0.0
            for j in range(steps):
                a = t + E + d[j]
                t = a.max() if k == "allreduce" else a.min() if k == "solo" else a[init[j]]
            speed[k].append(steps / t)
    return {"solo_speedup": stat(s / b for s, b in zip(speed["solo"], speed["allreduce"])),
            "majority_speedup": stat(m / b for m, b in zip(speed["majority"], speed["allreduce"])),
            "majority_over_solo": stat(m / s for m, s in zip(speed["majority"], speed["solo"]))}


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "collectives_sim.json").write_text(json.dumps(results, indent=1))
    lines = ["# Collectives simulator against eager-SGD (issue 12, acceptance 1–3)", "",
             f"CPU: {results['cpu']}; load {results['load']}; seeds {results['seeds']}; simulator wall time "
             f"{results['wall_s']['median']:.2f} s (median of {results['wall_s']['repeats']}, "
             f"{results['wall_s']['min']:.2f}–{results['wall_s']['max']:.2f}).", "",
             "Activation model: free-running processes (persistent schedule, late processes take the result and "
             "go on); the Fig. 9 micro-benchmark with a barrier per iteration. Figures: median over seeds "
             "(min–max).", "", "| check | simulated | target | result |", "|---|---|---|---|"]
    for r in results["checks"]:
        v = r["simulated"]
        lines.append(f"| {r['check']} | {fmt(v)} | {r['target']} | {'PASS' if r['pass'] else 'FAIL: ' + r['why']} |")
    lines += ["", "## Hyperplane: solo speedup and majority/solo by run length (median over seeds)", "",
              "| steps / D ms | sync period s | solo speedup | majority/solo | solo NAP | majority NAP |",
              "|---|---|---|---|---|---|"]
    for key, f in results["hyperplane"].items():
        lines.append(f"| {key} | {fmt(f['sync_period_s'])} | {fmt(f['solo_speedup'])} | "
                     f"{fmt(f['majority_over_solo'])} | {fmt(f['solo_nap'], 2)} | {fmt(f['majority_nap'], 2)} |")
    lines += ["", "## Reference: lock-step (not a model of real processes; the issue's targets follow from it)", "",
              "Every process starts step j when collective j−1 ends, even one still sleeping (its unfinished "
              "delay is dropped).", "", "| imbalance | solo speedup | majority speedup | majority/solo |",
              "|---|---|---|---|"]
    for spec, f in results["lock_step"].items():
        lines.append(f"| {spec} | {fmt(f['solo_speedup'])} | {fmt(f['majority_speedup'])} | "
                     f"{fmt(f['majority_over_solo'])} |")
    (out / "collectives_sim.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    seeds = list(range(args.seeds))
    walls = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        (c1, f1), (c2, f2), (c3, f3) = micro(seeds), hyperplane(seeds), rotate(seeds)
        walls.append(time.perf_counter() - t0)
    checks = c1 + c2 + c3
    results = {"cpu": cpu_model(), "load": load_averages(), "seeds": len(seeds),
               "wall_s": {**stat(walls), "repeats": len(walls)}, "checks": checks, "micro": f1,
               "hyperplane": f2, "rotate": f3,
               "lock_step": {spec: lock_step(spec, seeds) for spec in
                             ("random:k=1:delay=200ms", "random:k=1:delay=300ms", "random:k=1:delay=400ms",
                              "rotate:50ms:400ms")}}
    write(results, Path(__file__).resolve().parent / "results")
    for r in checks:
        print(f"{'PASS' if r['pass'] else 'FAIL'} {r['check']}: {fmt(r['simulated'])} (target {r['target']})"
              + (f" — {r['why']}" if r["why"] else ""))
    print(f"{sum(r['pass'] for r in checks)}/{len(checks)} checks pass; results in benchmarks/results/"
          "collectives_sim.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
