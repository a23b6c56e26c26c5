"""What ``validate``'s calibration iterations see against the scored ones, quiet and beside a busy loop (issue 33).

One ``validate`` job (``run_validation``: vgg_mid training, batch 48,
``random,tac``, 1300mbit, the defaults otherwise), on a quiet machine and
beside a busy loop on one core. Per kind of iteration (the unscored
unordered and TIC calibration iterations, the scored random and TAC ones):
each worker's compute per step beside its own transfers (``B``) and with its
link quiet (``A``) (:func:`~dlsched.analyses.calibration.compute_split`),
and their sum; the fitted slow-down beside transfers ``f``; TAC's measured
and predicted mean. The question: when TAC is predicted too fast beside a
busy loop, is it the fitted ``f``, or does TAC compute more than the TIC
calibration it is predicted from?

Writes ``benchmarks/results/validate_calibration.json`` and ``.md``. Needs
root (network namespaces). Run under ``flock /tmp/dlsched-heavy.lock``.
"""
from __future__ import annotations

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
MODEL, MODE, BATCH, RATE = "benchmarks/enforcement/models.py:vgg_mid", "training", 48, "1300mbit"
KINDS = (("unordered", "calibration, unordered"), ("enforced", "calibration, TIC"), ("random", "scored random"),
         ("tac", "scored TAC"))


def one(hog: bool) -> dict:
    """One job's splits per kind of iteration, its fit and TAC's measured and predicted mean."""
    from dlsched.analyses.calibration import compute_split
    from dlsched.jobs import in_situ_oracle as iso
    from dlsched.jobs import validate_run as vr
    saved: dict = {"hog": hog}
    calibrate = iso.InSituOracle.calibrate

    def keep(self, unordered, enforced):  # what the calibration is given, then the calibration itself
        saved["unordered"] = [compute_split(r) for g in unordered for r in g]
        saved["enforced"] = [compute_split(r) for g in enforced for r in g]
        calibrate(self, unordered, enforced)
    iso.InSituOracle.calibrate = keep
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if hog else None
    try:
        v = vr.run_validation(MODEL, mode=MODE, batch=BATCH, rate=RATE, orders=("random", "tac"))
    finally:
        iso.InSituOracle.calibrate = calibrate
        if busy is not None:
            busy.kill()
            busy.wait()
    for name, run in v.runs.items():
        saved[name] = [compute_split(r) for rs in run.timeline.by_iteration().values() for r in rs]
    tac = v.runs["tac"]
    saved.update(overlap=v.oracle.overlap, tac_measured=statistics.fmean(m["iteration_time"] for m in tac.measured),
                 tac_predicted=float(tac.predicted["fair"].per_iteration["iteration_time"].mean()))
    return saved


def report(runs: list) -> str:
    from dlsched.machine import cpu_model
    lines = ["# `validate`'s calibration against the scored iterations, quiet and beside a busy loop", "",
             f"CPU: {cpu_model()}. `run_validation({MODEL!r}, mode={MODE!r}, batch={BATCH}, rate={RATE!r}, "
             "orders=('random', 'tac'))`; per kind of iteration, each worker's compute per step beside its own "
             "transfers (B) and with its link quiet (A), means over the records, and the median of A + B (s).", "",
             "| machine | kind | records | B | A | A + B, median | fitted f | TAC measured / predicted (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        for key, label in KINDS:
            b, a = [x[0] for x in r[key]], [x[1] for x in r[key]]
            lines.append(f"| {'busy loop' if r['hog'] else 'quiet'} | {label} | {len(b)} | {statistics.fmean(b):.3f} "
                         f"| {statistics.fmean(a):.3f} | {statistics.median(x + y for x, y in zip(a, b)):.3f} "
                         f"| x{r['overlap']:.3f} | {r['tac_measured']:.3f} / {r['tac_predicted']:.3f} |")
    return "\n".join(lines) + "\n"


def run_and_report(stem: str, run, report) -> int:
    """Unless ``--report``: as root, ``run()`` the jobs and save them as ``results/<stem>.json``; then write
    ``results/<stem>.md`` from the saved runs with ``report`` and print it."""
    from dlsched.atomic import atomic_write_text
    if "--report" not in sys.argv:
        if os.geteuid() != 0:
            print("SKIP: needs root (network namespaces)")
            return 0
        atomic_write_text(OUT / f"{stem}.json", json.dumps(run(), indent=1) + "\n")
    runs = json.loads((OUT / f"{stem}.json").read_text())
    atomic_write_text(OUT / f"{stem}.md", report(runs))
    print((OUT / f"{stem}.md").read_text())
    return 0


def main() -> int:
    return run_and_report("validate_calibration", lambda: [one(False), one(True)], report)


if __name__ == "__main__":
    sys.exit(main())
