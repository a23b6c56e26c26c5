"""``dlsched validate`` at the settings users run (issue 33): the CLI's defaults, 3 repeats, quiet and beside a CPU hog.

What a user types: ``dlsched validate MODEL --mode M --batch B --orders
random,tac --json`` with everything else at its default (20 measured
iterations, 3 warm-up rounds, ``--rate auto``, the ``fair`` link model), for
``vgg_mid`` and the example transformer, inference and training, at the
batches of ``bench_validate.py`` (where the balanced rate is one a veth link
carries on 2 cores). Each configuration runs 3 times on a quiet machine and
3 times with a CPU-heavy process beside the cluster (a busy loop on one core,
started before the command and stopped after it), since that is how users'
machines are. Through the CLI, as a user runs it.

Also, from each run's measured trace of the ``random`` order (``--trace-out``),
whether the real unordered send order is a uniform permutation, as the
simulator draws it: the mean Spearman correlation between a parameter's place
in the send order and its place in the declaration order (0 for uniform, with
a standard error of about ``1/√(k(n−1))`` over ``k`` orders of ``n``), and the
largest z-score of a parameter's mean place.

Targets (issue 33): at the defaults, the median TAC/random error within ±0.05
and no run beyond ±0.07; the mean iteration time within 10% and the p95 within
15% in every run; beside the hog, the mean within 10% and the ratio within
±0.07.

With ``--iterations N`` (and ``--part``, ``--hog``) the runs use N measured
iterations instead, kept apart in ``validate_defaults_iterations{N}.json`` and
summarised on stdout: whether the error's spread is the 20 iterations'
sampling.

Needs root (network namespaces). Resumable: each run is appended to
``benchmarks/results/validate_defaults.json`` as it ends; ``--report`` writes
``validate_defaults.md``. Run under ``flock /tmp/dlsched-heavy.lock``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
OUT = HERE / "results"
RUNS_FILE = OUT / "validate_defaults.json"
sys.path.insert(0, str(HERE))
from bench_validate import BATCH, MODELS, PARTS  # noqa: E402  (the same configurations, at the CLI's defaults)
REPEATS = 3
HOG = "import time\nend = time.time() + 3600\nwhile time.time() < end:\n    pass\n"


def _runs_file(iterations: int | None) -> Path:
    """The defaults' runs, or with ``--iterations N`` the runs at N measured iterations, kept apart."""
    return RUNS_FILE if iterations is None else OUT / f"validate_defaults_iterations{iterations}.json"


def _load(path: Path = RUNS_FILE) -> list:
    return json.loads(path.read_text()) if path.exists() else []


def _save(runs: list, path: Path = RUNS_FILE) -> None:
    from dlsched.atomic import atomic_write_text
    OUT.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(runs, indent=1) + "\n")


def order_check(trace: Path, declared: list[str]) -> dict:
    """How far the random order's real send orders are from uniform permutations (module docstring)."""
    place = {n: i for i, n in enumerate(declared)}
    orders: dict[tuple, list] = {}
    for e in json.loads(trace.read_text())["traceEvents"]:
        a = e.get("args", {})
        if e.get("ph") == "X" and a.get("kind") == "recv" and a.get("priority") is not None:
            name = e["name"].split(":", 1)[1] if e["name"].startswith("w") and ":" in e["name"] else e["name"]
            orders.setdefault((a.get("worker"), a.get("iteration"), e["tid"]), []).append((a["priority"], name))
    rhos, pos = [], {}
    for seq in orders.values():
        names = [n for _, n in sorted(seq)]
        n = len(names)
        if n < 3:
            continue
        d = [place[x] for x in names]
        ranks = sorted(range(n), key=d.__getitem__)
        r = [0] * n
        for k, i in enumerate(ranks):
            r[i] = k
        rhos.append(1 - 6 * sum((i - r[i]) ** 2 for i in range(n)) / (n * (n * n - 1)))
        for i, x in enumerate(names):
            pos.setdefault(x, []).append(i / (n - 1))
    if not rhos:
        return {"orders": 0}
    k = len(rhos)
    n = statistics.median(len(v) for v in orders.values())
    z = [abs(statistics.fmean(v) - 0.5) / math.sqrt(1 / 12 * (n + 1) / (n - 1) / len(v)) for v in pos.values()]
    return {"orders": k, "transfers_per_order": n, "mean_spearman": statistics.fmean(rhos),
            "standard_error": 1 / math.sqrt(k * (n - 1)), "max_place_z": max(z), "parameters": len(z)}


def one(part: str, hog: bool, iterations: int | None = None) -> dict:
    """One ``dlsched validate`` run at the defaults (with a busy loop beside it when ``hog``; with ``iterations``,
    that many measured iterations instead of the default)."""
    from dlsched.answers.validate import Schedule
    from dlsched.importers.loader import load_model
    from dlsched.machine import cpu_model, load_averages
    model, mode = part.split("/")
    batch = BATCH[(model, mode)]
    with tempfile.TemporaryDirectory(prefix="dlsched-bench-") as tmp:
        cmd = [str(Path(sys.executable).with_name("dlsched")), "validate", MODELS[model], "--mode", mode,
               "--batch", str(batch), "--orders", "random,tac", "--trace-out", tmp, "--json",
               *(["--iterations", str(iterations)] if iterations else [])]
        hog_proc = subprocess.Popen([sys.executable, "-c", HOG]) if hog else None
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=1800)
        finally:
            if hog_proc is not None:
                hog_proc.kill()
                hog_proc.wait()
        if proc.returncode != 0:
            raise SystemExit(f"{part}: dlsched validate exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        out = json.loads(proc.stdout)
        graph = load_model(MODELS[model], mode=mode, batch=batch, ps=1)
        check = order_check(Path(tmp) / "random.trace.json", [r.name for r in graph.recvs()])
    rows = out["orders"]
    keep = ("measured_mean", "predicted_mean", "mean_error", "measured_p95", "predicted_p95", "p95_error",
            "measured_ratio", "predicted_ratio", "ratio_error", "measured_ratio_ci", "predicted_ratio_ci",
            "ratio_error_ci", "ratio_verdict", "replayed_mean", "measured_straggler", "predicted_straggler")
    return {"part": part, "hog": hog, "iterations": iterations or Schedule.iterations, "rate": out["hosts"]["rate"],
            "cpu": cpu_model(), "load": load_averages(), "seconds": time.monotonic() - t0,
            "link_models": out["link_models"],
            "orders": {k: {x: v.get(x) for x in keep} for k, v in rows.items()},
            "compute_beside_transfers": out["oracle"]["compute_beside_transfers"], "order_check": check,
            "background_cores": out["oracle"].get("background_cores"), "crowd": out["oracle"].get("crowd"),
            "link_mbit": out["oracle"]["bandwidth_bytes_per_s"] * 8e-6,
            "link_latency_us": out["oracle"]["latency_s"] * 1e6,
            "compute_per_worker_s": out["oracle"]["compute_per_worker_s"],
            "calibration_check": out.get("calibration_check")}


def _label(run: dict, runs: list) -> str:
    """``1``, ``2``, … for quiet runs, ``hog`` (``hog 1``, ``hog 2``, … if several) for runs beside a hog."""
    same = [x for x in runs if x["hog"] == run["hog"]]
    i = next(k for k, x in enumerate(same) if x is run) + 1
    return str(i) if not run["hog"] else "hog" if len(same) == 1 else f"hog {i}"


def _spread(xs) -> str:
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):+.3f} ({min(xs):+.3f}…{max(xs):+.3f})" if xs else "-"


def _check(run: dict) -> str:
    """The calibration check's TIC/unordered ratio error (``-`` for runs from before it existed)."""
    c = run.get("calibration_check")
    return "-" if not c else f"{c['ratio_error']:+.3f}{' (beyond)' if c['beyond_target'] else ''}"


def report(runs: list) -> str:
    from dlsched.machine import cpu_model
    lines = ["# `dlsched validate` at its defaults (issue 33)", "",
             f"CPU: {cpu_model()}. `dlsched validate MODEL --mode M --batch B --orders random,tac --json`, everything "
             "else at its default (20 measured iterations, 3 warm-up rounds, `--rate auto`, fair links); 3 repeats "
             "per configuration on a quiet machine, and 3 with a busy loop on one core beside the cluster. "
             "Errors "
             "are predicted less measured, relative for times, absolute for the TAC/random ratio; brackets: the "
             "run's 95% bootstrap interval of the ratio error; f: the fitted slow-down of compute beside the "
             "worker's own transfers; load: the other load measured before the job, in cores, and the factor of "
             "an op with one worker computing against all (`crowd`; absent: a run before it was modelled); "
             "link measured: bandwidth and per-transfer latency; calibration check: the "
             "calibrated simulator's TIC/unordered ratio error on the job's own unscored calibration iterations "
             "(`calibration_check`; beyond: outside ±0.05).", "",
             "| configuration | run | rate | link measured | fitted f; load | random mean err | TAC mean err "
             "| random p95 err "
             "| TAC p95 err "
             "| TAC/random measured | predicted | error [95% interval] | verdict | calibration check |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    discarded = [x for x in runs if x.get("discarded")]
    runs = [x for x in runs if not x.get("discarded")]
    for part in PARTS:
        mine = sorted((x for x in runs if x["part"] == part), key=lambda x: x["hog"])  # quiet runs first
        for r in mine:
            o, t = r["orders"]["random"], r["orders"]["tac"]
            ci = t["ratio_error_ci"]
            f = r["compute_beside_transfers"].split(":")[0]
            if r.get("crowd"):
                f += f"; load {r['background_cores']:.2f}, x{r['crowd'][0]:.3f}"
            link = f"{r['link_mbit']:.0f} Mbit/s" if r.get("link_mbit") else "-"
            if r.get("link_latency_us") is not None:
                link += f", {r['link_latency_us']:.0f} µs"
            lines.append(f"| {part} | {_label(r, mine)} | {r['rate']} | {link} | {f} | {o['mean_error']:+.1%} | "
                         f"{t['mean_error']:+.1%} | {o['p95_error']:+.1%} | {t['p95_error']:+.1%} | "
                         f"{t['measured_ratio']:.3f} | {t['predicted_ratio']:.3f} | {t['ratio_error']:+.3f} "
                         f"[{ci[0]:+.2f}, {ci[1]:+.2f}] | {t['ratio_verdict']} | {_check(r)} |")
    lines += ["", "## Against the targets", "", "| configuration | median ratio error (quiet runs) | worst run "
              "| worst mean err | worst p95 err | hog, worst run: mean err, ratio err |", "|---|---|---|---|---|---|"]
    checks = []
    for part in PARTS:
        quiet = [x for x in runs if x["part"] == part and not x["hog"]]
        hog = [x for x in runs if x["part"] == part and x["hog"]]
        if not quiet:
            continue
        errs = [x["orders"]["tac"]["ratio_error"] for x in quiet]
        means = [e for x in quiet for e in (x["orders"]["random"]["mean_error"], x["orders"]["tac"]["mean_error"])]
        p95s = [e for x in quiet for e in (x["orders"]["random"]["p95_error"], x["orders"]["tac"]["p95_error"])]
        med, worst = statistics.median(errs), max(errs, key=abs)
        # the worst of the runs beside a hog
        hm = max((x["orders"][k]["mean_error"] for x in hog for k in ("random", "tac")), key=abs) if hog else None
        hr = max((x["orders"]["tac"]["ratio_error"] for x in hog), key=abs) if hog else None
        lines.append(f"| {part} | {med:+.3f} | {worst:+.3f} | {max(means, key=abs):+.1%} | {max(p95s, key=abs):+.1%} "
                     f"| {'-' if not hog else f'{hm:+.1%}, {hr:+.3f}'} |")
        checks += [(f"{part}: median ratio error within ±0.05", abs(med) <= 0.05),
                   (f"{part}: every run's ratio error within ±0.07", abs(worst) <= 0.07),
                   (f"{part}: every mean within 10%", max(abs(e) for e in means) <= 0.10),
                   (f"{part}: every p95 within 15%", max(abs(e) for e in p95s) <= 0.15)]
        if hog:
            checks += [(f"{part}, beside a CPU hog: mean within 10%", abs(hm) <= 0.10),
                       (f"{part}, beside a CPU hog: ratio within ±0.07", abs(hr) <= 0.07)]
    lines += [""] + [f"- {'PASS' if ok else 'FAIL'} {name}" for name, ok in checks]
    lines += ["", "## How much of the ratio error is the run's own sampling", "",
              "Each run's 95% bootstrap interval of the ratio error, over 3.92, is the error's standard deviation "
              "as the run itself puts it (`sd`: its 20 iterations per order, its calibration rounds, random's "
              "predictions paired with the measured iterations whose seeded orders they ran). `rms z`: the root "
              "mean square of error / sd over the runs (1 if the intervals hold what moves the error). "
              "`expected beyond ±0.07`: how many of the runs a predictor exact in expectation would still put "
              "beyond ±0.07, the sum over runs of P(|N(0, sd)| > 0.07). Across runs: the standard deviation of the "
              "measured and of the predicted ratio from run to run at the same configuration (the rate `auto` "
              "picks moves from run to run, and the machine with it).", "",
              "| configuration | runs | median sd | rms z | expected beyond ±0.07 | measured beyond ±0.07 "
              "| measured ratio across runs, sd | predicted ratio across runs, sd |",
              "|---|---|---|---|---|---|---|---|"]
    for part in PARTS:
        for hog in (False, True):
            mine = [x for x in runs if x["part"] == part and x["hog"] == hog]
            if not mine:
                continue
            errs = [x["orders"]["tac"]["ratio_error"] for x in mine]
            sds = [(x["orders"]["tac"]["ratio_error_ci"][1] - x["orders"]["tac"]["ratio_error_ci"][0]) / 3.92
                   for x in mine]
            rms = math.sqrt(statistics.fmean((e / d) ** 2 for e, d in zip(errs, sds)))
            expect = sum(1 - math.erf(0.07 / d / math.sqrt(2)) for d in sds)
            across = [statistics.stdev(x["orders"]["tac"][k] for x in mine) if len(mine) > 1 else math.nan
                      for k in ("measured_ratio", "predicted_ratio")]
            lines.append(f"| {part}{', beside a hog' if hog else ''} | {len(mine)} | {statistics.median(sds):.3f} "
                         f"| {rms:.2f} | {expect:.2f} | {sum(abs(e) > 0.07 for e in errs)} "
                         f"| {across[0]:.3f} | {across[1]:.3f} |")
    checked = [x for x in runs if x.get("calibration_check")]
    if checked:
        lines += ["", "## The simulator on its own calibration iterations", "",
                  "Per run, the TIC/unordered ratio error of the calibrated simulator on the job's unscored "
                  "calibration iterations, beside the scored TAC/random ratio error. `flagged`: runs whose check is "
                  "beyond ±0.05 (`validate` then says that the enforced orders' predicted gains carry it).", "",
                  "| runs | check ratio error, median (range) | scored ratio error, median (range) "
                  "| scored beyond ±0.07 | of those, flagged | flagged, scored within ±0.07 |", "|---|---|---|---|---|---|"]
        for hog in (False, True):
            mine = [x for x in checked if x["hog"] == hog]
            if not mine:
                continue
            cs = [x["calibration_check"]["ratio_error"] for x in mine]
            es = [x["orders"]["tac"]["ratio_error"] for x in mine]
            miss = [x for x in mine if abs(x["orders"]["tac"]["ratio_error"]) > 0.07]
            flag = [x for x in mine if x["calibration_check"]["beyond_target"]]
            lines.append(f"| {'beside a hog' if hog else 'quiet'}: {len(mine)} | {_spread(cs)} | {_spread(es)} "
                         f"| {len(miss)} | {sum(x['calibration_check']['beyond_target'] for x in miss)} "
                         f"| {sum(abs(x['orders']['tac']['ratio_error']) <= 0.07 for x in flag)} |")
    if checked:
        lines += ["", "## Two sets of iterations of the same job, predicted alike", "",
                  "Per run, the measured TAC/random ratio less the measured TIC/unordered ratio of the same job's "
                  "calibration iterations (`measured gap`), and the same difference predicted (`predicted gap`). "
                  "TAC and TIC, random and unordered, are predicted within a few thousandths of each other here, "
                  "and the simulator is calibrated on the calibration iterations: the measured gap is how far two "
                  "sets of 20 iterations of orders that run alike fall apart in one job, a floor under the scored "
                  "error of any prediction calibrated in that job. `r`: the correlation of the scored error with "
                  "the measured gap over the runs (−1: the scored error is the gap, turned over); `error + gap`: "
                  "what is left of the scored error once the gap is taken out, its sd and mean: the model's own "
                  "error against the job's calibration iterations.", "",
                  "| runs | measured gap, sd | measured gap, median (range) | predicted gap, median (range) "
                  "| scored error, sd | r | error + gap, sd (mean) | runs with \|measured gap\| > 0.05 "
                  "| their scored errors |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for hog in (False, True):
            mine = [x for x in checked if x["hog"] == hog]
            if len(mine) < 2:
                continue
            g = gaps(mine)
            wide = [e for gm, e in zip(g["measured"], g["errors"]) if abs(gm) > 0.05]
            sd = statistics.pstdev
            lines.append(f"| {'beside a hog' if hog else 'quiet'}: {len(mine)} | {sd(g['measured']):.3f} "
                         f"| {_spread(g['measured'])} | {_spread(g['predicted'])} | {sd(g['errors']):.3f} "
                         f"| {g['r']:+.2f} | {sd(g['left']):.3f} ({statistics.fmean(g['left']):+.3f}) "
                         f"| {len(wide)} | {', '.join(f'{e:+.3f}' for e in wide) or '-'} |")
    lines += ["", "## Is the real unordered order uniform?", "",
              "Per run, over the `random` order's measured iterations (each worker's and server's send order): the "
              "mean Spearman correlation between a parameter's place in the send order and in the declaration order "
              "(0 for uniform permutations), its standard error, and the largest z-score of a parameter's mean place. "
              "The permutations are seeded by (seed, server, worker, iteration): at the default seed every run sends "
              "the same ones.",
              "", "| configuration | run | orders × transfers | mean Spearman ρ | standard error "
              "| max |z| of a place |",
              "|---|---|---|---|---|---|"]
    for part in PARTS:
        mine = [x for x in runs if x["part"] == part]
        for r in mine:
            c = r["order_check"]
            if c.get("orders"):
                lines.append(f"| {part} | {_label(r, mine)} | {c['orders']} × "
                             f"{c['transfers_per_order']:.0f} | {c['mean_spearman']:+.3f} | "
                             f"{c['standard_error']:.3f} | "
                             f"{c['max_place_z']:.2f} (of {c['parameters']}) |")
    if discarded:
        lines += ["", "## Discarded runs", "", "Not in the tables above; each was run again:", ""]
        lines += [f"- {x['part']}{' (hog)' if x['hog'] else ''}, rate {x['rate']}: ratio error "
                  f"{x['orders']['tac']['ratio_error']:+.3f}, TAC mean {x['orders']['tac']['mean_error']:+.1%}. "
                  f"{x['discarded']}" for x in discarded]
    return "\n".join(lines) + "\n"


def gaps(runs: list) -> dict:
    """Per run (with a calibration check), the scored TAC/random ratio less the calibration iterations'
    TIC/unordered one, measured and predicted; the scored ratio errors; what is left of each error with the
    measured gap added back (``left``); and ``r``, the errors' correlation with the measured gaps."""
    def gap(x, side):
        c = x["calibration_check"]
        return x["orders"]["tac"][f"{side}_ratio"] - c["unordered"][side] / c["tic"][side]

    measured = [gap(x, "measured") for x in runs]
    errors = [x["orders"]["tac"]["ratio_error"] for x in runs]
    return {"measured": measured, "predicted": [gap(x, "predicted") for x in runs], "errors": errors,
            "left": [e + g for e, g in zip(errors, measured)],
            "r": statistics.correlation(errors, measured) if len(runs) > 2 else math.nan}


def summary(runs: list) -> str:
    """Each run's TAC/random error with its interval, per configuration the errors' spread, and over the runs
    quiet and beside a busy loop the measured gap's spread and lean and what it leaves of the error (:func:`gaps`)."""
    lines = []
    for part in PARTS:
        for hog in (False, True):
            mine = [x for x in runs if x["part"] == part and x["hog"] == hog and not x.get("discarded")]
            if not mine:
                continue
            errs = [x["orders"]["tac"]["ratio_error"] for x in mine]
            cis = ", ".join(f"{e:+.3f} [{x['orders']['tac']['ratio_error_ci'][0]:+.2f}, "
                            f"{x['orders']['tac']['ratio_error_ci'][1]:+.2f}]" for e, x in zip(errs, mine))
            means = max(abs(x["orders"][o]["mean_error"]) for x in mine for o in ("random", "tac"))
            sd = statistics.stdev(errs) if len(errs) > 1 else math.nan
            lines.append(f"{part}{' beside a busy loop' if hog else ''}, {mine[0]['iterations']} iterations: "
                         f"ratio errors {cis}; sd {sd:.3f}; worst mean error {means:.1%}")
    for hog in (False, True):
        mine = [x for x in runs if x["hog"] == hog and x.get("calibration_check") and not x.get("discarded")]
        if len(mine) > 2:
            g, sd, mean = gaps(mine), statistics.pstdev, statistics.fmean
            lines.append(f"{len(mine)} runs{' beside a busy loop' if hog else ''}: measured gap (scored TAC/random "
                         f"less calibration TIC/unordered) sd {sd(g['measured']):.3f}, "
                         f"mean {mean(g['measured']):+.3f}; scored error sd {sd(g['errors']):.3f}, "
                         f"r {g['r']:+.2f} with the gap; error + gap sd {sd(g['left']):.3f}, "
                         f"mean {mean(g['left']):+.3f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=PARTS + ["all"], default="all")
    ap.add_argument("--hog", action="store_true", help="the runs beside a CPU hog")
    ap.add_argument("--hog-runs", type=int, default=REPEATS, help=f"with --hog: runs per configuration [{REPEATS}]")
    ap.add_argument("--report", action="store_true", help="only write the report from the runs saved")
    ap.add_argument("--iterations", type=int, default=None,
                    help="measured iterations instead of the CLI's 20: how the error's spread shrinks with more; "
                         "kept apart in validate_defaults_iterations{N}.json, summarised, not in the report")
    args = ap.parse_args()
    path = _runs_file(args.iterations)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so a killed bench stops its CPU hog too
    if not args.report:
        if os.geteuid() != 0:
            print("SKIP: needs root (network namespaces)")
            return 0
        for part in PARTS if args.part == "all" else [args.part]:
            runs = _load(path)
            have = [x for x in runs if x["part"] == part and x["hog"] == args.hog and not x.get("discarded")]
            for _ in range((args.hog_runs if args.hog else REPEATS) - len(have)):
                r = one(part, args.hog, args.iterations)
                runs = _load(path) + [r]
                _save(runs, path)
                t = r["orders"]["tac"]
                print(f"{part}{' (hog)' if args.hog else ''}: rate {r['rate']}, ratio {t['measured_ratio']:.3f} "
                      f"measured, {t['predicted_ratio']:.3f} predicted ({t['ratio_error']:+.3f}), random mean "
                      f"{r['orders']['random']['mean_error']:+.1%}, tac {t['mean_error']:+.1%}; "
                      f"{r['seconds']:.0f} s", flush=True)
    if args.iterations is not None:
        print(summary(_load(path)))
        return 0
    from dlsched.atomic import atomic_write_text
    atomic_write_text(OUT / "validate_defaults.md", report(_load()))
    print((OUT / "validate_defaults.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
