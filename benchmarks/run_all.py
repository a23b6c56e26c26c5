"""Run every benchmark (``benchmarks/bench_*.py`` and ``benchmarks/*/run.py``) and print its report.

Each benchmark measures its targets as ratios side by side in one run and
prints PASS/FAIL lines; this runner only collects them. ``make bench``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    scripts = sorted(HERE.glob("bench_*.py")) + sorted(HERE.glob("*/run.py"))
    failed = []
    for script in scripts:
        print(f"\n=== {script.relative_to(HERE.parent)}", flush=True)
        rc = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        if rc:
            failed.append(script.name)
    print(f"\n{len(scripts) - len(failed)} benchmark scripts ran cleanly, {len(failed)} failed {failed or ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
