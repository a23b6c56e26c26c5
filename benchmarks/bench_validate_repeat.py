"""How much one ``dlsched validate`` run at fixed settings moves from run to run, against its own intervals.

``dlsched validate benchmarks/enforcement/models.py:vgg_mid --mode inference
--batch 128 --orders random,tac --rate 880mbit --json`` (the noisiest
configuration of ``bench_validate_defaults.py``, at a rate near the one
``--rate auto`` picks there, fixed so that runs are comparable), ``--runs``
times on a quiet machine. Per run: the TAC/random ratio measured and
predicted, the error and the run's 95% intervals; across runs: the standard
deviation of each, against the spread each run's own interval implies
(width / 3.92). The question it answers: is a run's error moved by what its
interval holds, or by more?

Each run is appended to ``benchmarks/results/validate_repeat.json`` with the
git revision it ran, and ``validate_repeat.md`` is written from them. Needs
root (network namespaces). Run under ``flock /tmp/dlsched-heavy.lock``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
OUT = HERE / "results"
RUNS_FILE = OUT / "validate_repeat.json"
CMD = ["validate", "benchmarks/enforcement/models.py:vgg_mid", "--mode", "inference", "--batch", "128",
       "--orders", "random,tac", "--rate", "880mbit", "--json"]


def _load() -> list:
    return json.loads(RUNS_FILE.read_text()) if RUNS_FILE.exists() else []


def summary(out: dict, revision: str) -> dict:
    """The figures kept of one run's ``--json``."""
    t, r = out["orders"]["tac"], out["orders"]["random"]
    return {"revision": revision, "cpu": out["cpu"], "compute_per_worker_s": out["oracle"]["compute_per_worker_s"],
            "random_measured": r["measured_mean"], "random_predicted": r["predicted_mean"],
            "tac_measured": t["measured_mean"], "tac_predicted": t["predicted_mean"],
            **{k: t[k] for k in ("measured_ratio", "predicted_ratio", "ratio_error", "measured_ratio_ci",
                                 "predicted_ratio_ci", "ratio_error_ci", "ratio_verdict")}}


def one() -> dict:
    from dlsched.atomic import atomic_write_text
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    proc = subprocess.run([str(Path(sys.executable).with_name("dlsched")), *CMD], capture_output=True, text=True,
                          cwd=REPO, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"dlsched validate exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    run = summary(json.loads(proc.stdout), rev.strip())
    atomic_write_text(RUNS_FILE, json.dumps(_load() + [run], indent=1) + "\n")
    return run


def report(runs: list) -> str:
    lines = ["# `dlsched validate` at fixed settings, run after run", "",
             f"`dlsched {' '.join(CMD)}` on a quiet machine; CPU: {runs[0]['cpu'] if runs else '-'}. Per run: the "
             "TAC/random ratio and its 95% interval; the error is predicted less measured.", "",
             "| run | revision | compute (s) | random measured / predicted (s) | TAC measured / predicted (s) "
             "| ratio measured [95%] | predicted [95%] | error [95%] | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for i, x in enumerate(runs, 1):
        m, p, e = x["measured_ratio_ci"], x["predicted_ratio_ci"], x["ratio_error_ci"]
        lines.append(f"| {i} | {x['revision']} | {x['compute_per_worker_s']:.3f} | {x['random_measured']:.3f} / "
                     f"{x['random_predicted']:.3f} | {x['tac_measured']:.3f} / {x['tac_predicted']:.3f} | "
                     f"{x['measured_ratio']:.3f} [{m[0]:.3f}, {m[1]:.3f}] | {x['predicted_ratio']:.3f} "
                     f"[{p[0]:.3f}, {p[1]:.3f}] | {x['ratio_error']:+.3f} [{e[0]:+.3f}, {e[1]:+.3f}] | "
                     f"{x['ratio_verdict']} |")
    lines += ["", "Per revision: the standard deviation across runs, against the median spread the runs' own "
              "intervals imply (width / 3.92).", "",
              "| revision | runs | measured ratio: across runs / its interval | predicted: across / interval "
              "| error: mean, across / interval |", "|---|---|---|---|---|"]
    for rev in dict.fromkeys(x["revision"] for x in runs):
        mine = [x for x in runs if x["revision"] == rev]

        def sd(key):
            return statistics.stdev(x[key] for x in mine) if len(mine) > 1 else float("nan")

        def implied(key):
            return statistics.median((x[key][1] - x[key][0]) / 3.92 for x in mine)
        lines.append(f"| {rev} | {len(mine)} | {sd('measured_ratio'):.3f} / {implied('measured_ratio_ci'):.3f} | "
                     f"{sd('predicted_ratio'):.3f} / {implied('predicted_ratio_ci'):.3f} | "
                     f"{statistics.fmean(x['ratio_error'] for x in mine):+.3f}, {sd('ratio_error'):.3f} / "
                     f"{implied('ratio_error_ci'):.3f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--report", action="store_true", help="only write the report from the runs saved")
    args = ap.parse_args()
    if not args.report:
        if os.geteuid() != 0:
            print("SKIP: needs root (network namespaces)")
            return 0
        for _ in range(args.runs):
            x = one()
            print(f"ratio {x['measured_ratio']:.3f} measured, {x['predicted_ratio']:.3f} predicted "
                  f"({x['ratio_error']:+.3f})", flush=True)
    from dlsched.atomic import atomic_write_text
    atomic_write_text(OUT / "validate_repeat.md", report(_load()))
    print((OUT / "validate_repeat.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
