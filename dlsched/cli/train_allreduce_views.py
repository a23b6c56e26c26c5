"""Tables of ``dlsched train-allreduce``: the run's settings, then the collectives measured side by side."""
from __future__ import annotations

from .common import column_table, console, fmt_seconds, key_value_table


def render(out: dict, model_sync_every: int) -> None:
    """Print :func:`dlsched.answers.train_allreduce.train_allreduce`'s figures."""
    processes = out["processes"]
    console.print(key_value_table(
        f"hyperplane regression · {processes} processes × {out['iterations']} steps · {out['activation']}",
        [("imbalance", out["imbalance"]), ("step padded to", fmt_seconds(out["step_pad_s"])),
         ("model synchronisation", f"every {model_sync_every} steps" if model_sync_every else "never")]))
    console.print(column_table(
        "collectives measured", ("collective", "steps/s", "speedup", "iteration", "latency", "NAP", "staleness",
                                 "missed updates", "validation MSE"),
        [(k, f"{c['steps_per_s']:.2f}", f"{c['speedup']:.2f}×" if "speedup" in c else "–",
          fmt_seconds(c["mean_iteration_s"]), fmt_seconds(c["mean_latency_s"]),
          f"{c['mean_nap']:.2f} / {processes}", f"{c['mean_staleness']:.2f} (max {c['max_staleness']})",
          f"{c['missed_rate']:.1%}", f"{c['final_loss']:.4g}") for k, c in out["collectives"].items()],
        left=("collective",)))
