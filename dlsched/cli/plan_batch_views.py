"""How ``dlsched plan-batch`` prints its answers: one device, a split over workers, the fastest batch."""
from __future__ import annotations

from .common import console, fmt_bytes, fmt_seconds


def print_device(answer):
    from rich.table import Table

    plan, est, points, table = answer.plan, answer.plan.estimate, answer.measurements, answer.throughput
    console.print(f"[bold]{est.model}[/]: largest batch [bold green]{plan.batch}[/] in {fmt_bytes(plan.capacity)} "
                  f"(usable {fmt_bytes(plan.usable_bytes)} with a {plan.margin:.0%} margin), "
                  f"[bold]{est.estimate}[/] estimate, optimizer {answer.optimizer}")
    t = Table(title=f"memory at batch {plan.batch}", title_justify="left")
    t.add_column("component")
    t.add_column("bytes", justify="right")
    t.add_column("note")
    for r in plan.frame().itertuples():
        t.add_row(r.component, fmt_bytes(r.bytes), r.note)
    console.print(t)
    if est.estimate == "measured":
        pts = ", ".join(f"b={p.batch}: {fmt_bytes(p.peak_bytes)}" for p in points)
        console.print(f"measured peaks ({est.details['method']}): {pts}")
    if table is not None:  # a linear reference is an oracle's
        source = answer.reference.source
        console.print(f"[bold]throughput[/] ({source}; an oracle scales linearly in the batch)"
                      if answer.reference.linear else f"[bold]throughput[/] ({source})")
        tt = Table()
        for c in ("batch", "step time", "samples/s", "fits"):
            tt.add_column(c, justify="right")
        for r in table.itertuples():
            tt.add_row(str(r.batch), fmt_seconds(r.time), f"{r.samples_per_s:,.1f}", "yes" if r.fits else "no")
        console.print(tt)


def print_split(answer):
    from rich import box
    from rich.table import Table

    est, plan, seconds = answer.estimate, answer.plan, answer.time_unit == "s"
    unit = (lambda x: f"{x:.3g} s" if x >= 1 else f"{x * 1e3:.4g} ms") if seconds else (lambda x: f"{x:.4g}")
    console.print(f"[bold]{est.model}[/]: global batch {plan.global_batch} over {len(plan.workers)} workers, "
                  f"{plan.method} split, {est.estimate} memory estimate, times "
                  f"{'in seconds' if seconds else 'in reference per-sample units'} ({answer.time_source})")
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("worker", "memory", "max b", "speed", "batch", "time", "weight", "equal split"):
        t.add_column(c, justify="right" if c != "worker" else "left", no_wrap=True)
    for r, w in zip(plan.frame().itertuples(), plan.workers):
        eq = f"{r.equal_batch}{'' if r.equal_fits else '*'} ({unit(r.equal_time)})"
        t.add_row(r.worker, fmt_bytes(w.memory), str(r.max_batch), "-" if r.speed != r.speed else f"{r.speed:g}",
                  str(r.batch), unit(r.time), f"{r.weight:.3f}", eq)
    console.print(t)
    d = plan.to_dict()
    comm = any("S_p/B" in w.source for w in plan.workers)
    console.print("weight = n·b/X, the factor on each worker's gradient that keeps the aggregate unbiased; "
                  + ("time = compute + S_p/B on workers with a bandwidth" if comm else "time = compute only"))
    if d["remove_workers"]:
        console.print(f"[bold yellow]remove {', '.join(d['remove_workers'])}[/]: the plan gives "
                      f"{'it' if len(d['remove_workers']) == 1 else 'them'} no samples; the others finish the global "
                      "batch sooner than its fixed cost alone (paper 002 §3.3: restart without that worker)")
    console.print(f"iteration time = slowest worker's compute + {unit(d['transfer_time'])} of transfers that "
                  "compute does not hide (simulated single-worker iteration under TAC)"
                  if d["transfer_time"] is not None else
                  "iteration time = slowest worker's compute + its S_p/B" if comm else
                  "iteration time = slowest worker's compute; transfers not included (they need --oracle)")
    if d["equal_split_violations"]:
        console.print(f"iteration time: plan {unit(d['iteration_time'])}; the equal split "
                      f"({unit(d['equal_split_time'])}) [bold red]does not fit memory[/] on "
                      f"{', '.join(d['equal_split_violations'])} (*)")
    else:
        console.print(f"iteration time: plan {unit(d['iteration_time'])}, equal split {unit(d['equal_split_time'])}"
                      + (f" → {d['gain']:.2f}× faster" if d["gain"] else ""))


def print_fastest(answer):
    from rich.table import Table

    curve = answer.curve
    console.print(f"fastest batch [bold green]{answer.batch}[/]: {answer.samples_per_s:,.1f} samples/s "
                  f"(step {fmt_seconds(answer.step_s)}); largest that fits {answer.largest_feasible}; at least "
                  f"{answer.num_classes} (classes); workspaces {'add up' if answer.constraint == 'sum' else 'share one buffer'}")
    # the rows where something changes: feasibility, the algorithm choice, the best batch (--json has them all)
    keys = [(r.feasible, r.algorithms if r.feasible else r.reason) for r in curve.itertuples()]
    keep = [i for i in range(len(curve)) if i in (0, len(curve) - 1) or keys[i] != keys[i - 1]
            or keys[i] != keys[i + 1] or curve.batch.iloc[i] == answer.batch]
    layers = "/".join(answer.algorithms)
    t = Table(caption=f"algorithms of {layers}; {len(keep)} of {len(curve)} batches, where the choice changes",
              caption_justify="left")
    for c in ("batch", "workspace left", "algorithms", "step time", "samples/s"):
        t.add_column(c, justify="left" if c == "algorithms" else "right", no_wrap=c != "algorithms")
    for r in curve.iloc[keep].itertuples():
        t.add_row(str(r.batch), fmt_bytes(r.workspace_left_bytes) if r.workspace_left_bytes == r.workspace_left_bytes
                  else "-", "/".join(r.algorithms) if r.feasible else f"[dim]{r.reason}[/]",
                  fmt_seconds(r.time_s) if r.feasible else "-",
                  f"{r.samples_per_s:,.1f}" + (" ←" if r.batch == answer.batch else "") if r.feasible else "-")
    console.print(t)
    if answer.no_tradeoff:
        console.print("no trade-off: at every batch one algorithm per layer is both fastest and leanest (as with "
                      "oneDNN's direct convolution on CPUs); memory only decides which batches fit")
    else:
        console.print(f"trade-off in: {', '.join(answer.tradeoff_layers)}")
