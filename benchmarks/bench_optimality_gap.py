"""How far TIC, TAC and a random order are from the exact optimum (TicTac §4 vs §3.1).

Over random training and inference DAGs with 6–8 parameters (one or two
parameter servers), the exact optimal strict order is found by
branch-and-bound (:func:`dlsched.analyses.exact.exact_order`) and each
heuristic's simulated makespan is compared with it:
``gap = (makespan − optimum) / optimum``. Reported: mean and max gap (%) of
TAC and TIC, the random order's mean gap (mean over seeds per graph), and how
often each heuristic is optimal. Every gap must be ≥ 0 (the optimum is a
lower bound for every strict order), which the script checks.

Run: ``python benchmarks/bench_optimality_gap.py [--graphs N] [--seed S]``.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ALGOS = ("tac", "tic", "topo")


def instances(n_graphs: int, seed: int = 0, params=(6, 8)):
    """Random DAGs (graph, times) with ``params[0]..params[1]`` parameters."""
    from dlsched.synthetic import random_dag

    rng = random.Random(seed)
    for k in range(n_graphs):
        p = rng.randint(*params)
        yield random_dag(rng.randint(p, 3 * p), p, training=rng.random() < 0.6, ps=rng.choice([1, 1, 2]),
                         seed=rng.randrange(10**6), integer_times=rng.random() < 0.3)


def measure(n_graphs: int = 50, seed: int = 0, params=(6, 8)):
    """One row per graph: optimum, each order's makespan and gap (%)."""
    import pandas as pd

    from dlsched.analyses.compare import compare_orders
    from dlsched.analyses.exact import exact_order

    rows = []
    for graph, times in instances(n_graphs, seed, params):
        t0 = time.perf_counter()
        best = exact_order(graph, times)
        row = {"graph": graph.name, "transfers": len(graph.recvs()), "ps": graph.ps_count, "mode": graph.mode,
               "optimum": best.makespan, "proven": best.proven, "nodes": best.explored,
               "exact_s": time.perf_counter() - t0}
        spans = compare_orders(graph, times, (*ALGOS, "random")).set_index("algorithm").makespan
        for algo, span in spans.items():
            row[f"{algo}_gap"] = 100 * (span - best.makespan) / best.makespan
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(df):
    """Per order: mean gap, max gap (%), share of graphs where it is optimal."""
    import pandas as pd

    from dlsched.analyses.compare import RANDOM_SEEDS

    out = []
    for algo in (*ALGOS, "random"):
        g = df[f"{algo}_gap"]
        out.append({"order": algo + (f" (mean of {RANDOM_SEEDS} seeds)" if algo == "random" else ""),
                    "mean_gap_pct": g.mean(), "max_gap_pct": g.max(), "optimal_share": (g <= 1e-9).mean()})
    return pd.DataFrame(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    df = measure(args.graphs, args.seed)
    s = summarise(df)
    print(f"{len(df)} random DAGs, {df['transfers'].min()}–{df['transfers'].max()} transfers, "
          f"{(df['ps'] > 1).sum()} with two servers, {(df['mode'] == 'training').sum()} training; "
          f"all optima proven: {bool(df['proven'].all())}; exact search {df['exact_s'].sum():.1f} s "
          f"(max {df['exact_s'].max():.2f} s, {int(df['nodes'].sum()):,} nodes); total {time.perf_counter() - t0:.1f} s")
    print(f"{'order':<26}{'mean gap %':>12}{'max gap %':>12}{'optimal on':>12}")
    for r in s.itertuples():
        print(f"{r.order:<26}{r.mean_gap_pct:>12.2f}{r.max_gap_pct:>12.2f}{r.optimal_share:>11.0%}")
    gaps = df[[c for c in df.columns if c.endswith("_gap")]]
    ok = bool(df["proven"].all()) and bool((gaps >= -1e-9).all().all())
    print(f"{'PASS' if ok else 'FAIL'}: every optimum proven and no order beats it (min gap "
          f"{gaps.min().min():.3g}%)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
