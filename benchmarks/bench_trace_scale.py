"""Trace scale (issue 28): a 1,000,000-event Kineto trace read and broken down, beside Holistic Trace Analysis.

Synthesises the trace from a real one, ``nccl_rank0_of16.json.gz`` (rank 0 of
a 16-GPU NCCL job, 5 ProfilerSteps, about 109,000 events; ``../shared/traces``):
the events of its steps are repeated back to back, each copy shifted by the
steps' period, its ``ProfilerStep#N`` renumbered and its correlation, external
and flow ids offset so that launches still pair with their kernels, until the
file holds at least 1,000,000 events (the metadata events once). Written
gzipped to a temporary folder, alone, as HTA wants a folder of rank files.

Then, side by side in one run, each repeat in a fresh process:

- **dlsched**: ``read_kineto`` plus ``breakdown`` (per step) and ``hta_breakdown``;
- **HTA 0.5.0**: ``TraceAnalysis(trace_dir=...)`` plus ``get_temporal_breakdown``.

Reported: the work's wall time inside the process (imports excluded, timed
from just before the read) and the process's peak RSS (``getrusage`` in the process, at its end), median of
the repeats with their spread, the whole process's wall time, and HTA's
figures beside dlsched's (they must agree: the parity of tests/test_trace_hta.py
at scale). Targets: dlsched < 10 s, < 2 GB, and at least 2× faster than HTA.

Usage: ``flock /tmp/dlsched-heavy.lock python benchmarks/bench_trace_scale.py [--events 1000000] [--repeat 3]``
Writes ``benchmarks/results/trace_scale.md`` and ``.json``.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlsched.machine import cpu_model  # noqa: E402  (after the path: run as a script)
RESULTS = REPO / "benchmarks" / "results"
SOURCE = "nccl_rank0_of16.json.gz"
TARGET_EVENTS = 1_000_000
TARGET_SECONDS, TARGET_BYTES, TARGET_RATIO = 10.0, 2 * 2**30, 2.0

_DLSCHED = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from dlsched.formats.kineto_trace import read_kineto
from dlsched.analyses.trace_breakdown import breakdown, hta_breakdown
t1, c1 = time.perf_counter(), time.process_time()
t = read_kineto(sys.argv[1])
t2 = time.perf_counter()
b = breakdown(t)
h = hta_breakdown(t)
t3, c3 = time.perf_counter(), time.process_time()
print("RESULT " + json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "analysis_s": t3 - t2, "work_s": t3 - t1,
      "work_cpu_s": c3 - c1,
      "steps": len(b.steps), "events": t.counts["events"], "figures": h,
      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

_HTA = r"""
import json, logging, resource, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
logging.disable(logging.CRITICAL)
t1, c1 = time.perf_counter(), time.process_time()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
r = ta.get_temporal_breakdown(visualize=False).iloc[0]
t3, c3 = time.perf_counter(), time.process_time()
print("RESULT " + json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "analysis_s": t3 - t2, "work_s": t3 - t1,
      "work_cpu_s": c3 - c1,
      "steps": len(ta.t.get_iterations()), "figures": {k: float(r[k]) for k in ("idle_time_pctg",
      "compute_time_pctg", "non_compute_time_pctg", "kernel_time(us)")},
      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def synthesise(source: Path, out: Path, target: int) -> dict:
    """Write ``out`` (gzipped): ``source``'s steps repeated until it holds ``target`` events (module docstring)."""
    with gzip.open(source, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    first_step = min(int(e["name"].split("#")[1]) for e in steps)
    period = hi - lo
    meta = [e for e in events if "ts" not in e or e.get("ph") == "M"]
    body = [e for e in events if "ts" in e and e.get("ph") != "M" and lo <= e["ts"] < hi]
    ids = [e.get("id") for e in body if isinstance(e.get("id"), int)]
    ids += [e["args"].get(k) for e in body if isinstance(e.get("args"), dict)
            for k in ("correlation", "External id") if isinstance(e["args"].get(k), int)]
    id_step = 10 ** len(str(max(ids)))
    copies = -(-(target - len(meta)) // len(body))

    def shifted(e: dict, r: int) -> dict:
        e = dict(e, ts=e["ts"] + r * period)
        if r == 0:
            return e
        if isinstance(e.get("id"), int):
            e["id"] += r * id_step
        name = e.get("name", "")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + r * len(steps)}"
        a = e.get("args")
        if isinstance(a, dict):
            a = dict(a)
            for k in ("correlation", "External id"):
                if isinstance(a.get(k), int) and a[k] > 0:
                    a[k] += r * id_step
            e["args"] = a
        return e

    tmp = out.with_name(out.name + ".tmp")
    with gzip.open(tmp, "wt", compresslevel=6) as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        n = 0
        for e in meta:
            f.write(("," if n else "") + json.dumps(e) + "\n")
            n += 1
        for r in range(copies):
            f.write("".join("," + json.dumps(shifted(e, r)) + "\n" for e in body))
            n += len(body)
        f.write("]}\n")
    os.replace(tmp, out)
    return {"events": n, "copies": copies, "steps": copies * len(steps), "first_step": first_step,
            "source_events": len(events), "bytes_gz": out.stat().st_size}


def run_one(code: str, arg: str) -> dict:
    """Run ``code`` in a fresh interpreter; its result (with its own peak RSS) and the process's wall time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code, arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    line = [x for x in out.splitlines() if x.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"benchmark child failed:\n{out[-2000:]}\n{err[-2000:]}")
    res = json.loads(line[-1][len("RESULT "):])
    res["process_s"] = wall
    return res


def spread(xs: list[float], places: int = 2) -> str:
    return f"{statistics.median(xs):,.{places}f} ({min(xs):,.{places}f}–{max(xs):,.{places}f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="1,000,000-event trace: dlsched against HTA")
    ap.add_argument("--events", type=int, default=TARGET_EVENTS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", default=None, help=f"the trace to repeat (default: {SOURCE} in ../shared/traces)")
    args = ap.parse_args(argv)
    from tests.trace_files import shared_trace

    source = Path(args.source) if args.source else shared_trace(SOURCE)
    tools = [("dlsched", _DLSCHED)]
    if importlib.util.find_spec("hta") is not None:
        tools.append(("hta", _HTA))
    else:
        print("SKIP: the comparison with HTA (HolisticTraceAnalysis==0.5.0 is not installed; docs/traces.md)")
    with tempfile.TemporaryDirectory(prefix="dlsched-trace-scale-") as d:
        path = Path(d) / "rank0.json.gz"
        t0 = time.perf_counter()
        info = synthesise(source, path, args.events)
        print(f"synthesised {info['events']:,} events ({info['steps']} steps, {info['bytes_gz'] / 2**20:.1f} MiB gz) "
              f"from {source.name} in {time.perf_counter() - t0:.1f} s", flush=True)
        runs = {tool: [] for tool, _ in tools}
        for i in range(args.repeat):
            for tool, code in tools:
                r = run_one(code, str(path) if tool == "dlsched" else d)
                runs[tool].append(r)
                print(f"  repeat {i + 1} {tool:8s} work {r['work_s']:6.2f} s (CPU {r['work_cpu_s']:.2f}; read "
                      f"{r['read_s']:.2f}, analysis {r['analysis_s']:.2f}), process {r['process_s']:6.2f} s, "
                      f"peak RSS {r['peak_rss'] / 2**20:,.0f} MiB", flush=True)
    keys = ("work_s", "work_cpu_s", "read_s", "analysis_s", "process_s", "peak_rss")
    med = {t: {k: statistics.median(r[k] for r in rs) for k in keys} for t, rs in runs.items()}
    dl = med["dlsched"]
    checks = [
        (dl["work_s"] < TARGET_SECONDS, f"dlsched reads and breaks down {info['events']:,} events in "
         f"{dl['work_s']:.2f} s (target < {TARGET_SECONDS:.0f} s)"),
        (dl["peak_rss"] < TARGET_BYTES, f"dlsched's peak RSS {dl['peak_rss'] / 2**20:,.0f} MiB "
         f"(target < {TARGET_BYTES / 2**30:.0f} GiB)"),
    ]
    ratio = None
    if "hta" in runs:
        ratio = med["hta"]["work_s"] / dl["work_s"]
        fig_d, fig_h = runs["dlsched"][0]["figures"], runs["hta"][0]["figures"]
        agree = max(abs(fig_d[k] - fig_h[k]) for k in ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"))
        checks += [
            (ratio >= TARGET_RATIO, f"dlsched {ratio:.1f}× faster than HTA 0.5.0 (target ≥ {TARGET_RATIO:.0f}×; "
             f"CPU time {med['hta']['work_cpu_s'] / dl['work_cpu_s']:.1f}×)"),
            (agree <= 1.0, f"HTA's breakdown and dlsched's hta_breakdown agree within {agree:.3f} pp (≤ 1 pp)"),
        ]
    cpu = cpu_model()
    lines = [
        "# A 1,000,000-event trace: dlsched against Holistic Trace Analysis (issue 28)", "",
        f"CPU: {cpu}. Python {platform.python_version()}. Trace: {source.name}'s 5 steps repeated "
        f"{info['copies']}× ({info['events']:,} events, {info['steps']} ProfilerSteps, "
        f"{info['bytes_gz'] / 2**20:.1f} MiB gzipped). Each run in a fresh process; work = read + breakdown, "
        "imports excluded, wall and CPU time; peak RSS of the whole process; median of "
        f"{args.repeat} repeats (min–max). `benchmarks/bench_trace_scale.py`, {date.today().isoformat()}.", "",
        "| tool | what | work s | work CPU s | read s | analysis s | process s | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    whats = {"dlsched": "`read_kineto` + `breakdown` + `hta_breakdown`",
             "hta": "HTA 0.5.0 `TraceAnalysis(trace_dir=...)` + `get_temporal_breakdown`"}
    for t, rs in runs.items():
        cells = [spread([r[k] for r in rs]) for k in keys[:-1]] + [spread([r["peak_rss"] / 2**20 for r in rs], 0)]
        lines.append(f"| {t} | {whats[t]} | " + " | ".join(cells) + " |")
    if ratio is not None:
        lines += ["", f"HTA / dlsched work time: **{ratio:.1f}×**.", "",
                  "| figure | HTA 0.5.0 | dlsched `hta_breakdown` |", "|---|---|---|"]
        for k in ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"):
            lines.append(f"| {k} | {fig_h[k]:.2f} | {fig_d[k]:.2f} |")
    lines += ["", "## Against the targets", ""] + [f"- {'PASS' if ok else 'FAIL'}: {msg}" for ok, msg in checks]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trace_scale.md").write_text(text)
    (RESULTS / "trace_scale.json").write_text(json.dumps(
        {"cpu": cpu, "date": date.today().isoformat(), "trace": info, "runs": runs, "median": med,
         "ratio": ratio, "checks": [{"ok": ok, "what": msg} for ok, msg in checks]}, indent=1) + "\n")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
