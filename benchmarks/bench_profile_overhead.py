"""Profiling overhead (DESIGN §8): an instrumented run costs at most 3× a plain forward pass.

ResNet-50, batch 8, CPU, measured side by side in one run:

- plain: median wall time of 5 uninstrumented forward passes (``module(*inputs)``
  under ``no_grad``, after one warm-up);
- profiled: the whole ``profile_torch`` call (tracing included) divided by the
  whole-graph runs it makes (``runs + warmup``), and, for reference, one
  ``TimingInterpreter`` run alone.

Usage: ``python benchmarks/bench_profile_overhead.py [--batch 8] [--runs 5]``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    opts = parser.parse_args()

    import torch

    from dlsched.factory import call_factory
    from dlsched.importers.torch_importer import import_factory, trace_factory
    from dlsched.profiling.torch_profiler import profile_torch, timing_interpreter

    spec = str(REPO / "examples" / "torch_models.py") + ":resnet50"
    graph = import_factory(spec, batch=opts.batch)
    module, inputs, _ = call_factory(spec, opts.batch)
    module.eval()

    def plain():
        with torch.no_grad():
            module(*inputs)

    def wall(fn, n):
        fn()
        times = []
        for _ in range(n):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    plain_before = wall(plain, 5)
    start = time.perf_counter()
    df, missing = profile_torch(spec, graph, runs=opts.runs, warmup=opts.warmup)
    total = time.perf_counter() - start
    per_run = total / (opts.runs + opts.warmup)
    plain_after = wall(plain, 5)
    plain_median = statistics.median([plain_before, plain_after])

    traced = trace_factory(spec, batch=opts.batch, shapes=False)
    interp = timing_interpreter(traced.gm)

    def instrumented():
        with torch.no_grad():
            interp.run(*traced.args)

    interp_run = wall(instrumented, 5)

    ratio = per_run / plain_median
    print(f"model: resnet50 batch {opts.batch} on cpu ({torch.get_num_threads()} threads), "
          f"{len(df)} ops timed, {len(missing)} untimed")
    print(f"plain forward (median of 5, before/after): {plain_before * 1e3:.1f} / {plain_after * 1e3:.1f} ms")
    print(f"profile_torch total {total:.2f} s over {opts.runs + opts.warmup} runs = {per_run * 1e3:.1f} ms per run "
          f"(tracing included)")
    print(f"one TimingInterpreter run alone (median of 5): {interp_run * 1e3:.1f} ms "
          f"= {interp_run / plain_median:.2f}x plain")
    print(f"sum of per-op minima: {df['time'].sum() * 1e3:.1f} ms = {df['time'].sum() / plain_median:.2f}x plain")
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"{verdict}: profiling overhead {ratio:.2f}x a plain forward pass (target <= {TARGET:.0f}x)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
