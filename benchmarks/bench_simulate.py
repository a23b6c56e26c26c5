"""Simulation speed (DESIGN §8): at least 100,000 simulated ops per second.

Measured on the 5,000-op / 250-parameter synthetic training graph (two
parameter servers), over many repetitions, three ways:

* ``simulate()`` end to end (compiling the graph every call) — the PASS/FAIL figure;
* the compiled hot loop alone (what multi-iteration runs and the exact search repeat);
* four workers sharing the links (ops of all workers counted).

Rates are per CPU second of this process (one core), so that a busy shared
machine does not distort them; the wall-clock rate is printed beside.

Run: ``python benchmarks/bench_simulate.py [--reps N]``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dlsched.analyses.multiworker import run_workers  # noqa: E402
from dlsched.analyses.simulate import compile_graph, run_compiled, simulate, transfer_ranks  # noqa: E402
from dlsched.synthetic import random_dag  # noqa: E402

TARGET = 100_000


def rate(fn, ops: int, reps: int) -> tuple[float, float]:
    """(median, best) simulated ops per CPU second over ``reps`` timed calls.

    CPU time of this process, not wall time: on a shared machine other
    processes' load would otherwise be counted as the simulator's.
    """
    fn()  # warm up
    rates = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        rates.append(ops / max(time.process_time() - t0, 1e-9))
    return statistics.median(rates), max(rates)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    graph, times = random_dag(2237, 250, training=True, ps=2, seed=0)
    n = len(graph)
    print(f"graph: {graph.name}, {n} ops, {len(graph.recvs())} transfers, 2 servers; {args.reps} repetitions")
    end_to_end, best = rate(lambda: simulate(graph, times, seed=1), n, args.reps)
    sg = compile_graph(graph, times)
    rank = transfer_ranks(sg, None, seed=1)
    hot, hot_best = rate(lambda: run_compiled(sg, rank), n, args.reps)
    workers = 4
    multi, multi_best = rate(lambda: run_workers(sg, [sg.dur] * workers, [rank] * workers,
                                                  list(range(workers)), "serial"), n * workers, max(3, args.reps // 4))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.reps):
        simulate(graph, times, seed=1)
    wall = n * args.reps / (time.perf_counter() - t0)
    cpu_share = (time.process_time() - c0) / (time.perf_counter() - t0)
    print(f"{'measure (per CPU second)':<36}{'median ops/s':>14}{'best ops/s':>14}")
    print(f"{'simulate() end to end':<36}{end_to_end:>14,.0f}{best:>14,.0f}")
    print(f"{'compiled hot loop':<36}{hot:>14,.0f}{hot_best:>14,.0f}")
    print(f"{'4 workers, shared links':<36}{multi:>14,.0f}{multi_best:>14,.0f}")
    print(f"wall clock: {wall:,.0f} ops/s end to end while this process got {cpu_share:.0%} of a core")
    ok = end_to_end >= TARGET
    print(f"{'PASS' if ok else 'FAIL'}: simulate() runs {end_to_end:,.0f} ops/s end to end "
          f"(target ≥ {TARGET:,}; {end_to_end / TARGET:.1f}× the target)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
