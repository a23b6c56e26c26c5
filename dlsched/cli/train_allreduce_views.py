"""Tables of ``dlsched train-allreduce``: the run's settings, then the collectives measured side by side."""
from __future__ import annotations

from .common import column_table, console, fmt_seconds, key_value_table


def render(out: dict, regression) -> None:
    """Print :func:`dlsched.answers.train_allreduce.train_allreduce`'s figures (``regression``: its settings)."""
    model_sync_every, sync_every = regression.model_sync_every, regression.sync_every
    processes = out["processes"]
    console.print(key_value_table(
        f"hyperplane regression · {processes} processes × {out['iterations']} steps · {out['activation']}",
        [("imbalance", out["imbalance"]), ("step padded to", fmt_seconds(out["step_pad_s"])),
         ("model synchronisation", f"every {model_sync_every} steps" if model_sync_every else "never"),
         ("limiter", f"every {sync_every}th round synchronous" if sync_every else "none")]))
    console.print(column_table(
        "collectives measured", ("collective", "steps/s", "speedup", "iteration", "latency", "NAP", "lag",
                                 "model age", "missed", "MSE"),
        [(k, f"{c['steps_per_s']:.2f}", f"{c['speedup']:.2f}×" if "speedup" in c else "–",
          fmt_seconds(c["mean_iteration_s"]), fmt_seconds(c["mean_latency_s"]),
          f"{c['mean_nap']:.2f} / {processes}", f"{c['mean_staleness']:.2f} ({c['max_staleness']})",
          f"{c['mean_version_staleness']:.2f} ({c['max_version_staleness']})",
          f"{c['missed_rate']:.1%}", f"{c['final_loss']:.4g}") for k, c in out["collectives"].items()],
        left=("collective",)))
    console.print("lag: steps between a gradient's step and the round that takes it; model age: rounds completed "
                  "between the start of its step and that round (Lemma 6.1's τ); missed: results never read; MSE: "
                  "validation error of rank 0's replica.")
    cols = out["collectives"]
    if "ddp" in cols:
        c = cols["ddp"]
        console.print(f"DDP's latency {fmt_seconds(c['mean_latency_s'])}: the all-reduce itself (the last "
                      f"arrival's latency) {fmt_seconds(c['last_arrival_latency_s'])}, waiting for others "
                      f"{fmt_seconds(c['mean_latency_s'] - c['last_arrival_latency_s'])}.")
    acts = [f"{k} {fmt_seconds(c['activation_s'])}" for k, c in cols.items() if c.get("activation_s") is not None]
    if acts:
        console.print("activation, from the initiator to the last progress thread: " + ", ".join(acts) + ".")
