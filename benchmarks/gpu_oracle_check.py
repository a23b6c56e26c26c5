"""The GPU profiler's oracle against a real step: ``python3 benchmarks/gpu_oracle_check.py OUT`` (gpu_check.sh).

Reads ``OUT/oracle_cuda.csv`` (``dlsched profile --device cuda``: CUDA events around each op),
``OUT/oracle_trace.csv`` (``--from-trace`` of a real DDP trace: the kernels each op launched) and
``OUT/ddp_trace.json`` (``dlsched trace --json`` of that trace: the device compute of each measured step),
and prints the compute each gives, op by op and per step.
"""
import json
import sys

import pandas as pd

out = sys.argv[1]
try:
    a, b = (pd.read_csv(f"{out}/{f}") for f in ("oracle_cuda.csv", "oracle_trace.csv"))
    steps = json.load(open(f"{out}/ddp_trace.json"))["per_step"]
except (OSError, KeyError, ValueError) as e:
    sys.exit(f"missing input: {e}")
a, b = (d[d.resource.str.startswith("compute")] for d in (a, b))
device = pd.Series([s["compute"] for s in steps]).median() / 1e3
print(f"compute ms: GPU profiler (events) {a.time.sum() * 1e3:.3f} over {len(a)} ops; trace import (kernels) "
      f"{b.time.sum() * 1e3:.3f} over {len(b)} ops; measured device compute per DDP step (median of "
      f"{len(steps)}) {device:.3f}; profiler / measured {a.time.sum() * 1e3 / device:.3f}")
m = a.merge(b, on="op", suffixes=("_events", "_trace"))
r = m.time_events / m.time_trace.where(m.time_trace > 0)
free = a[~a.op.isin(b.op)]
print(f"ops in both: {len(m)}; events / kernels per op: median {r.median():.3f}, p10 {r.quantile(.1):.3f}, "
      f"p90 {r.quantile(.9):.3f}; ops that launch no kernel: {len(free)}, {free.time.sum() * 1e3:.3f} ms, "
      f"the longest {free.time.max() * 1e6:.2f} us")
for t, g in m.groupby("op_type_events"):
    if g.time_events.sum() > 5e-4:
        print(f"  {t:45s} n={len(g):3d} events {g.time_events.sum() * 1e3:7.3f} ms  kernels "
              f"{g.time_trace.sum() * 1e3:7.3f} ms")
