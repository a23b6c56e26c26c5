"""Enforcement benchmark: the PyTorch hook on network-namespace hosts (DESIGN §6, TicTac §6).

One parameter server and ``--workers`` workers, each in its own network
namespace, joined by a bridge; the server's link is limited to ``--rate`` by a
``tc`` tbf qdisc in both directions, so transfer time is real. The model is the
VGG-like ``benchmarks/enforcement/models.py:vgg_mid`` (35 MB of parameters; VGG-16
itself, 528 MB, does not fit 3+ processes on a 2-core machine). For each order —
random (a fresh random order per worker and iteration: the unenforced baseline),
topo (first use in topological order), TIC and TAC (from ``dlsched.analyses``,
with a torch-profiler oracle for compute and ``latency + bytes/rate`` for
transfers) — it runs inference and training, discards warm-up iterations and
reports iterations/s, mean and p95 iteration time, and the straggler share
``(max_i m_i − min_i m_i) / max_i m_i`` (``m_i``: worker i's makespan within the
iteration; mean and max over iterations).

Needs root (``ip netns``, ``tc``); without it prints a skip message and exits 0.
Results: ``benchmarks/results/enforcement_single_run.json`` and ``.md``: one run
on one machine, a smoke check of the hook on shaped links. The figures the
docs/validate.md quotes (medians of 3 repeats at the rate the tool picks, with spreads,
predicted beside measured) come from ``benchmarks/bench_validate.py``. Targets (TicTac §6:
up to 37.7% and 2.3×): TAC inference throughput ≥ 1.15× random, straggler share
≥ 2× lower.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))
SPEC = "benchmarks/enforcement/models.py:vgg_mid"


def compute_orders(mode: str, batch: int, rate_bytes: float) -> dict[str, list[str]]:
    """Priority orders (parameter names, first first) for topo, TIC and TAC."""
    from dlsched.analyses.tac import tac_order
    from dlsched.analyses.tic import tic_order
    from dlsched.profiling.oracle_times import oracle_times
    from dlsched.formats.priority_file import make_priority_file
    from dlsched.importers.torch_importer import import_factory
    from dlsched.profiling.oracle import assemble_oracle
    from dlsched.profiling.torch_profiler import profile_torch
    graph = import_factory(SPEC, mode=mode, batch=batch)
    graph.assign_ps(1)
    topo_pos = {op.name: i for i, op in enumerate(graph.topological_order())}
    topo = {r.name: min((topo_pos[s] for s in graph.successors(r.name)), default=len(topo_pos))
            for r in graph.recvs()}
    df, untimed = profile_torch(SPEC, graph, runs=2, warmup=1)
    oracle = assemble_oracle(graph, df, untimed, rate_bytes, 1e-4, default_time=0.0)
    times = oracle_times(oracle.frame, graph, default_time=0.0)
    out = {}
    for name, prio in (("topo", topo), ("tic", tic_order(graph)), ("tac", tac_order(graph, times))):
        out[name] = make_priority_file(graph, prio, name).order
    return out


def summarize(run, warmup: int) -> dict:
    spans = run.timeline.iteration_spans(skip=warmup)
    durs = [s["end"] - s["start"] for s in spans]
    strag = []
    for s in spans:
        m = list(s["makespans"].values())
        strag.append((max(m) - min(m)) / max(m))
    durs_sorted = sorted(durs)
    p95 = durs_sorted[min(len(durs) - 1, int(round(0.95 * (len(durs) - 1))))]
    return {"iters_per_s": 1 / statistics.mean(durs), "mean_s": statistics.mean(durs), "p95_s": p95,
            "straggler_mean": statistics.mean(strag), "straggler_max": max(strag), "iterations": len(durs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--modes", default="inference,training")
    ap.add_argument("--orders", default="random,topo,tic,tac")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: the enforcement benchmark needs root (ip netns, tc); not run")
        return 0
    from dlsched.hooks.torch_ps import PSConfig, launch_local, order_from_module, rank_env
    from dlsched.runtime.netns import Cluster
    num, unit = a.rate.lower().rstrip("bit"), 1.0  # tc syntax: 1gbit, 500mbit
    for suffix, mult in (("g", 1e9), ("m", 1e6), ("k", 1e3)):
        if num.endswith(suffix):
            num, unit = num[:-1], mult
    rate_bytes = float(num) * unit / 8
    t_start = time.monotonic()
    cluster = Cluster(1 + a.workers, a.rate)
    results = {"model": SPEC, "workers": a.workers, "servers": 1, "rate": a.rate, "batch": a.batch,
               "iterations": a.iterations, "warmup": a.warmup, "orders_source": "dlsched.analyses.tic/tac", "runs": {}}
    try:
        cluster.create()
        envs = [rank_env(cluster.ifname(i)) for i in range(1 + a.workers)]
        prefixes = [cluster.exec_prefix(i) for i in range(1 + a.workers)]
        for mode in a.modes.split(","):
            try:
                orders = compute_orders(mode, a.batch, rate_bytes)
            except ImportError as e:  # an analysis or the importer is missing: say so, keep the baseline
                print(f"NOTE: TIC/TAC unavailable ({e}); 'topo' falls back to declaration order", flush=True)
                results["orders_source"] = "fallback: declaration order"
                orders = {"topo": order_from_module(SPEC)}
            orders["random"] = order_from_module(SPEC)
            for name in a.orders.split(","):
                if name not in orders:
                    continue
                cfg = PSConfig(model=SPEC, order=orders[name], servers=1, workers=a.workers,
                               iterations=a.iterations, batch=a.batch, mode=mode, unordered=(name == "random"),
                               window=1, timeout=120, lr=0.001, seed=1)
                init = f"tcp://{cluster.address(0)}:{random.randint(20000, 30000)}"
                run = launch_local(cfg, timeout=400, prefixes=prefixes, env=envs, init_method=init)
                r = summarize(run, a.warmup)
                results["runs"][f"{mode}/{name}"] = {**r, "order_head": orders[name][:4]}
                print(f"{mode:9s} {name:6s} {r['iters_per_s']:.3f} it/s  mean {r['mean_s'] * 1e3:7.1f} ms  "
                      f"p95 {r['p95_s'] * 1e3:7.1f} ms  straggler mean {r['straggler_mean']:.3f} "
                      f"max {r['straggler_max']:.3f}", flush=True)
    finally:
        cluster.destroy()
    results["wall_s"] = time.monotonic() - t_start
    return report(results)


def report(results: dict) -> int:
    from dlsched.atomic import atomic_write_text
    runs = results["runs"]
    lines = ["| mode | order | it/s | mean (ms) | p95 (ms) | straggler mean | straggler max |",
             "|---|---|---|---|---|---|---|"]
    for key, r in runs.items():
        mode, name = key.split("/")
        lines.append(f"| {mode} | {name} | {r['iters_per_s']:.3f} | {r['mean_s'] * 1e3:.1f} | {r['p95_s'] * 1e3:.1f} "
                     f"| {r['straggler_mean']:.3f} | {r['straggler_max']:.3f} |")
    verdicts = []
    if "inference/tac" in runs and "inference/random" in runs:
        tac, rnd = runs["inference/tac"], runs["inference/random"]
        speed = tac["iters_per_s"] / rnd["iters_per_s"]
        # the paper reports the maximum over iterations for stragglers (TicTac §6.1)
        strag = rnd["straggler_max"] / max(tac["straggler_max"], 1e-9)
        strag_mean = rnd["straggler_mean"] / max(tac["straggler_mean"], 1e-9)
        results["tac_vs_random"] = {"throughput_ratio": speed, "straggler_ratio_max": strag,
                                    "straggler_ratio_mean": strag_mean}
        verdicts.append(f"{'PASS' if speed >= 1.15 else 'FAIL'}: TAC inference throughput {speed:.3f}× random "
                        "(target ≥ 1.15×)")
        verdicts.append(f"{'PASS' if strag >= 2 else 'FAIL'}: worst straggler share random/TAC {strag:.2f}× "
                        f"(target ≥ 2×; mean over iterations {strag_mean:.2f}×)")
    table = "\n".join(lines)
    print("\n" + table + "\n" + "\n".join(verdicts))
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "enforcement_single_run.json", json.dumps(results, indent=1) + "\n")
    atomic_write_text(out / "enforcement_single_run.md",
                      f"# Enforcement benchmark (one run; medians of repeats: validate.md)\n\nmodel {results['model']}, 1 server, {results['workers']} workers, "
                      f"server link {results['rate']} (tc tbf), batch {results['batch']} per worker, "
                      f"{results['iterations'] - results['warmup']} measured iterations after {results['warmup']} "
                      f"warm-up\n\n{table}\n\n" + "\n".join(verdicts) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
