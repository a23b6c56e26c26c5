"""Predictions against real runs (DESIGN §4.7, issue 11): ``dlsched validate`` on real regimes, repeated.

For each configuration (``vgg_mid`` and the example transformer, inference and
training; 1 server, 2 workers, network namespaces with a tc-shaped server
link) the tool picks the link rate itself: ``--rate auto`` makes the link's
load equal a worker's compute, where ``dlsched bounds`` gives the largest
``S`` (≥ 0.5 is where ordering matters). Every configuration runs all four
orders (random, topo, TIC, TAC) with 40 measured iterations after 2 warm-up
ones (20 left the mean of an order ±3% on this VM, about ±0.05 on a ratio),
interleaved in one job (one iteration each in turn, with two unscored ones per
round, unordered and in TIC order, that calibrate the oracle's compute), 3
times at that rate; the
report gives the median of the 3 and their spread (min–max) for every figure,
for every link model of the simulator.
A comm-bound (link load 4× the compute) and a compute-bound (¼) rate run
random and TAC, 10 measured iterations each, 3 times per configuration
(``--regimes``, which resumes: it adds runs until each regime has 3).

TicTac Fig. 12a: every measured iteration of a configuration (3 runs × 4
orders × 40, unordered and enforced mixed) is rated by replaying the transfer
order its servers really sent through the simulator with the in-situ oracle;
the normalised measured step time (over the run's fastest iteration) is
fitted on that ``E``; the report gives R² (TicTac: 0.98; target ≥ 0.9).

Targets: predicted mean iteration time within 10% of measured in every
configuration; predicted TAC/random throughput within ±0.05 of measured;
measured TAC/random ≥ 1.15× (inference) and ≥ 1.05× (training).

Needs root (network namespaces); without it prints SKIP and exits 0. Run one
part at a time (each under ~10 minutes; ``flock /tmp/dlsched-heavy.lock``):
``--part vgg_mid/inference`` … then ``--report`` to write
``benchmarks/results/validate.md``/``.json`` and ``validate_fig12a.png``.
Without arguments every part runs, then the report.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
OUT = HERE / "results"
PARTS_FILE = OUT / "validate_parts.json"
MODELS = {"vgg_mid": "benchmarks/enforcement/models.py:vgg_mid", "transformer": "examples/torch_models.py:transformer"}
#: Batch per worker: large enough that the balanced rate is one a veth + tbf link carries on 2 cores (≤ ~1 Gbit/s).
BATCH = {("vgg_mid", "inference"): 128, ("vgg_mid", "training"): 48, ("transformer", "inference"): 64,
         ("transformer", "training"): 24}
PARTS = [f"{m}/{mode}" for m in MODELS for mode in ("inference", "training")]
ITERATIONS, WARMUP, REPEATS = 40, 2, 3
#: Measured iterations per order at the comm- and compute-bound rates (random and TAC only).
REGIME_ITERATIONS = 10
SHARINGS = ("serial", "fair")


def _load_parts() -> dict:
    return json.loads(PARTS_FILE.read_text()) if PARTS_FILE.exists() else {}


def _save_parts(parts: dict) -> None:
    from dlsched.atomic import atomic_write_text
    OUT.mkdir(parents=True, exist_ok=True)
    atomic_write_text(PARTS_FILE, json.dumps(parts, indent=1) + "\n")


def _one(model: str, mode: str, rate: str, orders, iterations: int) -> dict:
    from dlsched.answers.validate import report
    from dlsched.jobs.validate_run import run_validation
    v = run_validation(MODELS[model], workers=2, servers=1, rate=rate, mode=mode, orders=orders,
                       iterations=iterations, warmup=WARMUP, batch=BATCH[(model, mode)], network="netns",
                       say=lambda s: print(f"  {s}", flush=True))
    rep = {s: report(v, s) for s in SHARINGS}
    return {"rate": v.hosts["rate"], "compute": v.oracle.compute, "bytes": v.oracle.transfer_bytes, "reports": rep}


def _store(part: str, entry: dict) -> None:
    parts = _load_parts()
    parts[part] = entry
    _save_parts(parts)


def _regimes(entry: dict) -> dict:
    """An entry's regimes as ``{name: {"rate", "runs": [...]}}`` (files of before 11-23 held one run each)."""
    return {k: g if "runs" in g else {"rate": g["rate"], "runs": [g]} for k, g in entry.get("regimes", {}).items()}


def run_part(part: str, regimes: bool) -> None:
    from dlsched.jobs.validate_run import pick_rate
    model, mode = part.split("/")
    parts = _load_parts()
    entry = parts.get(part, {}) if regimes else {}
    if not regimes:
        runs, rate = [], "auto"
        for r in range(REPEATS):
            t0 = time.monotonic()
            print(f"{part}: repeat {r + 1}/{REPEATS} at rate {rate}", flush=True)
            res = _one(model, mode, rate, ("random", "topo", "tic", "tac"), ITERATIONS)
            rate = res["rate"]  # the tool's pick, kept for the repeats
            runs.append(res)
            print(f"  done in {time.monotonic() - t0:.0f} s", flush=True)
        entry = {"batch": BATCH[(model, mode)], "runs": runs, "regimes": entry.get("regimes", {})}
    else:  # resumable: each regime gets runs until it has REPEATS, at the rate its first run picked
        base = entry["runs"][0]
        have = _regimes(entry)
        for name, ratio in (("comm-bound", 4.0), ("compute-bound", 0.25)):
            g = have.setdefault(name, {"rate": pick_rate(base["compute"], base["bytes"], 2, ratio), "runs": []})
            while len(g["runs"]) < REPEATS:
                print(f"{part}: {name} at {g['rate']}, run {len(g['runs']) + 1}/{REPEATS}", flush=True)
                g["runs"].append(_one(model, mode, g["rate"], ("random", "tac"), REGIME_ITERATIONS))
                entry["regimes"] = have
                _store(part, entry)  # after every run: a long benchmark resumes where it stopped
    _store(part, entry)


def _spread(values) -> dict:
    v = [x for x in values if x is not None]
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)} if v else None


def _fmt(s, pct=False, digits=3) -> str:
    if s is None:
        return "-"
    f = (lambda x: f"{x * 100:+.1f}%") if pct else (lambda x: f"{x:.{digits}f}")
    return f"{f(s['median'])} ({f(s['min'])}…{f(s['max'])})"


def summarise(parts: dict) -> dict:
    """Median and spread over repeats of every figure, per configuration, order and link model."""
    from dlsched.analyses.validate import fit_line
    out = {}
    for part, entry in parts.items():
        runs = entry["runs"]
        conf = {"batch": entry["batch"], "rate": runs[0]["rate"], "compute_s": runs[0]["compute"],
                "speedup_S": _spread([r["reports"]["fair"]["bounds"]["speedup"] for r in runs]),
                "load_1min": [r["reports"]["fair"]["load_1min"] for r in runs], "models": {}}
        for s in SHARINGS:
            orders = {}
            for name in runs[0]["reports"][s]["orders"]:
                rows = [r["reports"][s]["orders"][name] for r in runs]
                orders[name] = {k: _spread([row.get(k) for row in rows]) for k in
                                ("measured_mean", "predicted_mean", "mean_error", "measured_p95", "predicted_p95",
                                 "measured_ratio", "predicted_ratio", "ratio_error", "measured_straggler",
                                 "predicted_straggler", "measured_efficiency", "predicted_efficiency")}
            pts = [p for r in runs for p in r["reports"][s]["replay_points"]]
            fit = fit_line([p["efficiency"] for p in pts], [p["normalised_time"] for p in pts])
            conf["models"][s] = {"orders": orders, "fig12a": fit,
                                 "max_abs_mean_error": max(abs(o["mean_error"]["median"]) for o in orders.values()),
                                 "max_abs_ratio_error": max(abs(o["ratio_error"]["median"]) for o in orders.values()
                                                            if o["ratio_error"]),
                                 "max_abs_straggler_error": max(abs(o["predicted_straggler"]["median"]
                                                                    - o["measured_straggler"]["median"])
                                                                for o in orders.values())}
        conf["regimes"] = {k: {s: {n: {key: _spread([r["reports"][s]["orders"][n].get(key) for r in g["runs"]])
                                       for key in ("measured_mean", "predicted_mean", "mean_error", "measured_ratio",
                                                   "predicted_ratio")}
                                   for n in g["runs"][0]["reports"][s]["orders"]} for s in SHARINGS}
                               | {"rate": g["rate"], "runs": len(g["runs"])}
                           for k, g in _regimes(entry).items()}
        out[part] = conf
    return out


def write_report(parts: dict) -> int:
    from dlsched.atomic import atomic_write_text
    from dlsched.machine import cpu_model
    summary = summarise(parts)
    def worst(s):  # worst mean-time error over the configurations, then the mean of them, then the ratio error
        ms = [c["models"][s] for c in summary.values()]
        return (round(max(m["max_abs_mean_error"] for m in ms), 3),
                round(sum(abs(o["mean_error"]["median"]) for m in ms for o in m["orders"].values()), 3),
                max(m["max_abs_ratio_error"] for m in ms))
    best = min(SHARINGS, key=worst)
    lines = ["# Predictions against real runs (`dlsched validate`)", "",
             f"CPU: {cpu_model()}; 1 server + 2 workers in network namespaces, server link "
             "shaped by tc tbf at the rate `validate --rate auto` picks (link load = one worker's compute); "
             f"{ITERATIONS} measured iterations after {WARMUP} warm-up per order; every figure is the median of "
             f"{REPEATS} runs with the spread (min…max). Written by `benchmarks/bench_validate.py`.", ""]
    verdicts = []
    for part, c in summary.items():
        lines += [f"## {part} (batch {c['batch']} per worker, rate {c['rate']}, S = {_fmt(c['speedup_S'], digits=2)},"
                  f" load {', '.join(f'{x:.1f}' for x in c['load_1min'])})", ""]
        for s in SHARINGS:
            lines += [f"link model **{s}**:", "",
                      "| order | measured mean (s) | predicted mean (s) | error | measured /random | predicted /random "
                      "| straggler measured | straggler predicted | E measured | E predicted |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            for name, o in c["models"][s]["orders"].items():
                lines.append(f"| {name} | {_fmt(o['measured_mean'])} | {_fmt(o['predicted_mean'])} | "
                             f"{_fmt(o['mean_error'], True)} | {_fmt(o['measured_ratio'])} | "
                             f"{_fmt(o['predicted_ratio'])} | {_fmt(o['measured_straggler'])} | "
                             f"{_fmt(o['predicted_straggler'])} | {_fmt(o['measured_efficiency'])} | "
                             f"{_fmt(o['predicted_efficiency'])} |")
            f = c["models"][s]["fig12a"]
            lines += ["", f"Fig. 12a ({f['points']} iterations): normalised step time = {f['slope']:.3f}·E + "
                          f"{f['intercept']:.3f}, R² = {f['r2']:.3f}", ""]
        for k, g in c["regimes"].items():
            lines.append(f"{k} rate {g['rate']} ({g['runs']} runs of {REGIME_ITERATIONS} iterations, {best} links): "
                         + "; ".join(f"{n} measured {_fmt(r['measured_mean'])} s, predicted "
                                     f"{_fmt(r['predicted_mean'])} s, error {_fmt(r['mean_error'], True)}"
                                     for n, r in g[best].items()))
        m = c["models"][best]
        err, rerr = m["max_abs_mean_error"], m["max_abs_ratio_error"]
        verdicts.append(f"{'PASS' if err <= 0.10 else 'FAIL'}: {part}: worst |predicted − measured| mean "
                        f"iteration time {err * 100:.1f}% ({best} links; target ≤ 10%)")
        verdicts.append(f"{'PASS' if rerr <= 0.05 else 'FAIL'}: {part}: worst |predicted − measured| throughput "
                        f"ratio over random {rerr:.3f} (target ≤ 0.05)")
        tac = m["orders"].get("tac", {}).get("measured_ratio")
        if tac:
            goal = 1.15 if part.endswith("inference") else 1.05
            verdicts.append(f"{'PASS' if tac['median'] >= goal else 'FAIL'}: {part}: measured TAC/random "
                            f"throughput {_fmt(tac)} (target ≥ {goal}×)")
        r2 = m["fig12a"]["r2"]
        verdicts.append(f"{'PASS' if r2 >= 0.9 else 'FAIL'}: {part}: Fig. 12a R² {r2:.3f} over "
                        f"{m['fig12a']['points']} iterations (target ≥ 0.9)")
    lines += ["## Link models", "", "| link model | " + " | ".join(summary) + " |",
              "|---|" + "---|" * len(summary)]
    for s in SHARINGS:
        lines.append(f"| {s} | " + " | ".join(f"{c['models'][s]['max_abs_mean_error'] * 100:.1f}% / "
                                             f"{c['models'][s]['max_abs_ratio_error']:.3f} / "
                                             f"{c['models'][s]['max_abs_straggler_error']:.3f}"
                                             for c in summary.values()) + " |")
    lines += ["", "(worst |mean error| / worst |ratio error| / worst |straggler share error| over the orders, "
                  "medians of the repeats); "
                  f"best: **{best}**", "", "## Verdicts", ""] + verdicts
    OUT.mkdir(parents=True, exist_ok=True)
    atomic_write_text(OUT / "validate.md", "\n".join(lines) + "\n")
    atomic_write_text(OUT / "validate.json", json.dumps({"cpu": cpu_model(), "best_link_model": best,
                                                         "configurations": summary, "verdicts": verdicts},
                                                        indent=1) + "\n")
    _plot(parts, best)
    print("\n".join(lines))
    return 0


def _plot(parts: dict, sharing: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dlsched.analyses.validate import fit_line
    from dlsched.atomic import atomic_path
    fig, axes = plt.subplots(1, len(parts), figsize=(4.2 * len(parts), 3.6), squeeze=False)
    for ax, (part, entry) in zip(axes[0], parts.items()):
        pts = [p for r in entry["runs"] for p in r["reports"][sharing]["replay_points"]]
        for order in ("random", "topo", "tic", "tac"):
            sel = [p for p in pts if p["order"] == order]
            ax.scatter([p["efficiency"] for p in sel], [p["normalised_time"] for p in sel], s=8, label=order)
        f = fit_line([p["efficiency"] for p in pts], [p["normalised_time"] for p in pts])
        if f["r2"] == f["r2"]:
            xs = [min(p["efficiency"] for p in pts), max(p["efficiency"] for p in pts)]
            ax.plot(xs, [f["slope"] * x + f["intercept"] for x in xs], "k-", lw=1)
        ax.set_title(f"{part}: R² = {f['r2']:.2f} ({len(pts)} it.)", fontsize=9)
        ax.set_xlabel("E of the replayed order")
        ax.set_ylabel("normalised step time")
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(OUT / "validate_fig12a.png") as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=PARTS, help="Run one configuration's 3 repeats (then --report).")
    ap.add_argument("--regimes", action="store_true", help="With --part: its comm- and compute-bound runs.")
    ap.add_argument("--report", action="store_true", help="Write the report from the parts run so far.")
    a = ap.parse_args()
    if a.report:
        return write_report(_load_parts())
    from dlsched.runtime import netns
    if not netns.available():
        print("SKIP: bench_validate needs root with ip and tc (network namespaces, tc-shaped link); not run")
        return 0
    for part in [a.part] if a.part else PARTS:
        run_part(part, a.regimes)
    return 0 if a.part else write_report(_load_parts())


if __name__ == "__main__":
    sys.exit(main())
