"""Tables of ``dlsched train-ps``: the per-iteration batches and times, and the phases between quota changes."""
from __future__ import annotations

from .common import column_table, fmt_seconds


def _row(values, fmt) -> str:
    return " ".join(fmt(v) for v in values)


def history_table(out: dict, every: int | None = None):
    """Every ``every``-th iteration (about 20 rows by default) and the last: each worker's batch, busy time
    (ms) and CPU share, and the iteration time at server 0."""
    hist = out["history"]
    every = every or max(1, len(hist) // 20)
    shown = [e for e in hist if e["iteration"] % every == 0 or e is hist[-1]]
    return column_table(
        f"{out['config']['policy']} · X = {out['config']['global_batch']} · per iteration",
        ("it", "batches", "busy ms", "CPU shares", "time"),
        [(str(e["iteration"]), _row(e["sizes"], lambda b: f"{b:2d}"), _row(e["busy"], lambda t: f"{t * 1e3:3.0f}"),
          _row(e["cpu"], lambda c: f"{c:.3g}"), fmt_seconds(e["time"])) for e in shown])


def phase_table(out: dict):
    """One row per phase between quota changes: its quotas, last split and settled iteration time."""
    rows = [(f"{p['first']}–{p['last']}", "–" if p["quotas"] is None else " ".join(f"{q:g}" for q in p["quotas"]),
             " ".join(map(str, p["split"])), fmt_seconds(p["settled_time"])) for p in out["phases"]]
    title = "phases (settled: median of each phase's second half)"
    if "prediction" in out:
        pred = out["prediction"]
        title += f" · quotas predict the split {pred['split']} and BSP/LB-BSP {pred['bsp_over_lbbsp']:.2f}"
    return column_table(title, ("iterations", "CPU quotas", "last split", "settled time"), rows)
