"""TAC speed (DESIGN §8): the fast TAC against the straightforward definition, same graph, same run.

Target: on a 5,000-op / 250-parameter training graph, fast TAC under 1 s and at
least 50× faster than the straightforward implementation of DESIGN §4.4
(``tests/reference_orders.py``), with identical output. Also reports fast TIC.
Run: ``python benchmarks/bench_tac.py``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dlsched.analyses.tac import tac_order  # noqa: E402
from dlsched.analyses.tic import tic_order  # noqa: E402
from dlsched.synthetic import random_dag  # noqa: E402
from tests.reference_orders import reference_tac, reference_tic  # noqa: E402

TARGET_SECONDS = 1.0
TARGET_SPEEDUP = 50.0


def timed(fn, *args):
    """(CPU seconds, result); CPU time keeps the figures honest on a shared machine."""
    t0, w0 = time.process_time(), time.perf_counter()
    result = fn(*args)
    timed.wall = time.perf_counter() - w0
    return time.process_time() - t0, result


def main() -> int:
    graph, times = random_dag(2500, 250, training=True, seed=0)
    print(f"graph: {len(graph):,} ops, {len(graph.recvs())} parameters, {graph.nx.number_of_edges():,} edges")
    fast_runs = [timed(tac_order, graph, times) for _ in range(3)]
    fast_s = min(s for s, _ in fast_runs)
    fast = fast_runs[0][1]
    tic_s = min(timed(tic_order, graph)[0] for _ in range(3))
    print("running the straightforward TAC once (about a minute of CPU)…", flush=True)
    ref_s, ref = timed(reference_tac, graph, times)
    ref_wall = timed.wall
    same = fast == ref and all(r == fast for _, r in fast_runs)
    tic_same = tic_order(graph) == reference_tic(graph)
    speedup = ref_s / fast_s
    print(f"fast TAC (best of 3):   {fast_s:.3f} s CPU")
    print(f"straightforward TAC:    {ref_s:.2f} s CPU ({ref_wall:.2f} s wall)")
    print(f"speedup:                {speedup:.0f}x")
    print(f"fast TIC (best of 3):   {tic_s:.3f} s CPU  (identical to the reference: {tic_same})")
    checks = [
        ("identical TAC output", same),
        (f"fast TAC < {TARGET_SECONDS:g} s", fast_s < TARGET_SECONDS),
        (f"speedup >= {TARGET_SPEEDUP:g}x", speedup >= TARGET_SPEEDUP),
        ("identical TIC output", tic_same),
    ]
    for label, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {label}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
