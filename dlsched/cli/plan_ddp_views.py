"""How ``dlsched plan-ddp`` prints its answer: the cap sweep, the recommendation and why, the ordered all-reduce."""
from __future__ import annotations

from .common import column_table, console, fmt_bytes, fmt_seconds


def print_plan(out: dict) -> None:
    console.print(f"[bold]{out['model']}[/]: {out['workers']} workers, {fmt_bytes(out['model_bytes'])} of "
                  f"gradients, {out['algorithm']} all-reduce, α {fmt_seconds(out['alpha_s'])}, "
                  f"β {fmt_bytes(out['beta_Bps'])}/s ({out['network']})")
    rec = out["recommended"]
    rows = []
    for c in out["caps"]:
        mark = "*" if c is rec or c == rec else ""
        cap = "default (25)" if c["default"] else f"{c['bucket_cap_mb']:g}"
        rows.append((f"{mark}{cap}", fmt_bytes(c["first_bucket_bytes"]), str(c["buckets"]), fmt_seconds(c["step_s"]),
                     fmt_seconds(c["exposed_comm_s"]), f"{c['E']:.2f}"))
    console.print(column_table("DDP step by bucket_cap_mb (MiB; * recommended)",
                               ("bucket_cap_mb", "first bucket", "buckets", "step", "exposed comm", "E"), rows,
                               left=("bucket_cap_mb",)))
    kwargs = ", ".join(f"{k}={v!r}" for k, v in out["ddp_kwargs"].items())
    console.print(f"[bold]recommended[/]: DistributedDataParallel(model, {kwargs})  "
                  f"step {fmt_seconds(rec['step_s'])}, E {rec['E']:.2f}")
    console.print(f"  {out['why']}")
    console.print(f"  gradient_as_bucket_view=False would take {fmt_seconds(out['gradient_as_bucket_view_false_step_s'])}"
                  " (a copy of every gradient into its bucket and back)")
    rows = [(fmt_bytes(o["piece_bytes"]), str(o["pieces"]), fmt_seconds(o["step_s"]), f"{o['E']:.2f}")
            for o in out["ordered"]]
    console.print(column_table("ordered all-reduce by piece size", ("piece size", "pieces", "step", "E"), rows))
    best = out["ordered_best"]
    console.print(f"[bold]ordered all-reduce[/]: best {fmt_bytes(best['piece_bytes'])} pieces, step "
                  f"{fmt_seconds(best['step_s'])}, gain {out['ordered_gain']:.3f}x, S = {out['S']:.3f}")
    console.print(f"  {out['verdict']}")
    if out["order_file"]:
        console.print(f"  schedule written to {out['order_file']}")
