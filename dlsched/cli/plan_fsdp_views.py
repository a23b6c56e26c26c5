"""How ``dlsched plan-fsdp`` prints its answer: FSDP2's default against the plan, and what the plan sets."""
from __future__ import annotations

from .common import column_table, console, fmt_bytes, fmt_seconds


def print_plan(out: dict) -> None:
    budget = (f", budget {fmt_bytes(out['memory_budget_bytes'])} per process less {out['memory_margin']:.0%} "
              "headroom" if out["memory_budget_bytes"] else "")
    console.print(f"[bold]{out['model']}[/]: {out['workers']} processes, α {fmt_seconds(out['alpha_s'])}, "
                  f"β {fmt_bytes(out['beta_Bps'])}/s ({out['network']}){budget}; {out['candidates']} schedules tried")
    rows = []
    for key in ("default", "plan"):
        c = out[key]
        rows.append((key, c["label"], fmt_seconds(c["step_s"]), fmt_seconds(c["exposed_comm_s"]), f"{c['E']:.2f}",
                     fmt_bytes(c["peak_bytes"])))
    console.print(column_table("FSDP2 step, one process", ("", "schedule", "step", "exposed comm", "E", "peak memory"),
                               rows, left=("", "schedule")))
    plan = out["plan"]
    console.print(f"[bold]units[/] (forward order): {', '.join(plan['units']) or 'the root only'}")
    console.print(f"  {out['verdict']}")
    if out["plan_file"]:
        console.print(f"  plan written to {out['plan_file']}: apply it with "
                      "dlsched.hooks.fsdp.apply_plan(model, path) after the rendezvous")
