"""``dlsched simulate MODEL --oracle O``: simulated iterations under a transfer order."""
from __future__ import annotations

import statistics

import click

from dlsched import limits

from .common import (NONNEG_FLOAT, POSITIVE_INT, SEED, console, emit_json, fmt_seconds, load_graph, max_work_option,
                     model_options, oracle_options, progress)

ALGOS = ("tic", "tac", "random", "topo", "exact", "unordered")
RANDOM_SEEDS = 5  # --compare: the random order is the mean over this many seeds


@click.command()
@model_options
@oracle_options(required=True)
@click.option("--priorities", "priority_path", type=click.Path(dir_okay=False), default=None,
              help="Priority file (from dlsched order) to enforce.")
@click.option("--algo", type=click.Choice(ALGOS), default=None,
              help="Compute the order here instead: tic, tac, random, topo, exact, or unordered (random per "
                   "worker and iteration, like a framework without ordering) [default: unordered].")
@click.option("--workers", type=POSITIVE_INT, default=1, show_default=True,
              help="Workers sharing the parameter servers' links.")
@click.option("--iterations", type=POSITIVE_INT, default=1, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seeds random orders and jitter.")
@click.option("--jitter", type=NONNEG_FLOAT, default=0.0, show_default=True,
              help="Lognormal sigma of per-op multiplicative noise, per worker and iteration (0: none).")
@click.option("--sharing", type=click.Choice(["serial", "fair"]), default="serial", show_default=True,
              help="serial: a link carries one transfer at a time; fair: one stream per worker, "
                   "link capacity split among them.")
@click.option("--time-limit", type=NONNEG_FLOAT, default=None,
              help="--algo exact: seconds to search (then any size is accepted).")
@click.option("--trace-out", type=click.Path(dir_okay=False), default=None,
              help="Write the (first iteration's) timeline as Chrome-trace JSON (Perfetto, chrome://tracing).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="Write a Gantt chart PNG.")
@click.option("--color-by", type=click.Choice(["priority", "kind"]), default="priority", show_default=True,
              help="Gantt colours: transfers by priority rank, or every op by kind.")
@click.option("--compare", default=None,
              help="Comma-separated orders to compare side by side, e.g. tic,tac,random,topo.")
@max_work_option(limits.SIMULATE, limits.EXACT)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def simulate(oracle, default_time, priority_path, algo, workers, iterations, seed, jitter, sharing, time_limit,
             trace_out, plot, color_by, compare, max_work, as_json, **model_kw):
    """Simulate MODEL's iterations under a transfer order (DESIGN §4.6).

    Prints the makespan and scheduling efficiency E; with several workers or
    iterations also the iteration time and the straggler share (mean, p50, p95).
    The order comes from --priorities, or --algo (default: unordered).
    Work beyond --max-work op-steps (ops × workers × iterations, per order
    compared) is refused before it starts; long runs show a progress bar.
    """
    from dlsched.errors import DlschedError
    from dlsched.exporters.oracle_file import load_times

    if priority_path and algo:
        raise click.UsageError("give either --priorities or --algo, not both")
    compare_algos = _parse_compare(compare)
    runs = 1 + sum(RANDOM_SEEDS if a == "random" else 1 for a in compare_algos)
    # Refuse absurd options before the model is loaded, then again with its real size.
    limits.check_work(limits.simulate_work(None, workers, iterations, runs), limits.SIMULATE, "simulate", max_work)
    graph = load_graph(**model_kw)
    limits.check_work(limits.simulate_work(len(graph), workers, iterations, runs), limits.SIMULATE, "simulate",
                      max_work)
    times = load_times(oracle, graph, default_time)
    search = {"time_limit": time_limit, "max_work": max_work}
    label, priorities = _order(graph, times, priority_path, algo or "unordered", seed, search)
    # Every order first (the exact search has its own bar), then every simulation under one bar.
    compared = [(a, s, _order(graph, times, None, a, s, search)[1])
                for a in compare_algos for s in (range(seed, seed + RANDOM_SEEDS) if a == "random" else (seed,))]
    multi = workers > 1 or iterations > 1 or jitter > 0
    keep_timeline = bool(trace_out or plot)  # the per-op timeline of every worker costs 2-3× the simulation

    from dlsched.analyses.bounds import bounds, schedule_efficiency

    b = bounds(graph, times)
    upper, lower = float(b.upper), float(b.lower)
    per_run = len(graph) * workers * iterations
    sim = {"multi": multi, "workers": workers, "iterations": iterations, "jitter": jitter, "sharing": sharing}
    with progress(f"simulating {graph.name}", total=per_run * runs, unit="op-steps") as bar:
        result = _run(graph, times, priorities, seed=seed, keep_timeline=keep_timeline, report=bar.part(0), **sim)
        compared = [(a, _run(graph, times, p, seed=s, report=bar.part(per_run * (i + 1)), **sim))
                    for i, (a, s, p) in enumerate(compared)]
    makespan = result["makespan"]
    out = {
        "model": graph.name,
        "mode": graph.mode,
        "algorithm": label,
        "makespan": makespan,
        "efficiency": float(schedule_efficiency(upper, lower, makespan)),
        "upper": upper,
        "lower": lower,
        "speedup": float(b.speedup),
        "ops": len(graph),
        "transfers": len(graph.recvs()),
        "parameter_servers": graph.ps_count,
        "workers": workers,
        "iterations": iterations,
        "seed": seed,
    }
    if multi:
        out.update(result["summary"])
        out["sharing"] = sharing
        out["jitter"] = jitter
    if compare_algos:
        rows = []
        for a in compare_algos:  # random: the mean over its seeds
            results = [r for name, r in compared if name == a]
            span = statistics.fmean(r["makespan"] for r in results)
            share = statistics.fmean(r["straggler_share"] for r in results)
            rows.append({"algorithm": a, "makespan": span, "efficiency": float(schedule_efficiency(upper, lower, span)),
                         "straggler_share": share})
        out["compare"] = rows
    title_order = label
    if trace_out:
        from dlsched.exporters.chrome_trace import write_chrome_trace

        try:
            write_chrome_trace(result["timeline"], trace_out, model=graph.name,
                               metadata={"algorithm": label, "makespan_s": makespan,
                                         "efficiency": out["efficiency"], "workers": workers})
        except OSError as e:
            raise DlschedError(f"{trace_out}: cannot write the trace ({e})") from None
        out["trace"] = trace_out
    if plot:
        from dlsched.exporters.gantt import plot_gantt

        try:
            plot_gantt(result["timeline"], plot, model=graph.name, order=title_order,
                       makespan=result["first_makespan"], efficiency=float(schedule_efficiency(upper, lower,
                                                                                       result["first_makespan"])),
                       color_by=color_by)
        except OSError as e:
            raise DlschedError(f"{plot}: cannot write the Gantt chart ({e})") from None
        out["plot"] = plot
    if as_json:
        if multi:
            out["per_worker"] = result["per_worker"]
            out["per_iteration"] = result["per_iteration"]
        emit_json(out)
        return
    _print(out, result, multi)


def _parse_compare(text):
    if not text:
        return []
    algos = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in algos if a not in ALGOS]
    if bad:
        raise click.BadParameter(f"unknown order(s) {', '.join(bad)}; choose from {', '.join(ALGOS)}",
                                 param_hint="--compare")
    return algos


def _order(graph, times, priority_path, algo, seed, search):
    """(label, priorities or None) for a priority file or an algorithm; ``search``: exact's limits."""
    if priority_path:
        from dlsched.exporters.priority_file import read_priority_file

        pf = read_priority_file(priority_path, graph)
        return f"{pf.algorithm} (file)", pf.priorities
    if algo == "unordered":
        return "unordered", None
    from dlsched.analyses.orders import compute_order

    if algo != "exact":
        return algo, compute_order(graph, algo, times=times, seed=seed)
    limit = search["time_limit"]
    with progress(f"searching the exact order of {graph.name}" + (f" (at most {limit:g} s)" if limit else ""),
                  unit="search nodes") as bar:
        return algo, compute_order(graph, algo, times=times, seed=seed, progress=bar, **search)


def _run(graph, times, priorities, multi, workers, iterations, seed, jitter, sharing, keep_timeline=False,
         report=None):
    """Simulate; a uniform dict for both the single- and the multi-worker case."""
    if not multi:
        from dlsched.analyses.simulate import simulate

        s = simulate(graph, times, priorities, seed=seed)
        if report is not None:
            report(len(graph))
        return {"makespan": s.makespan, "first_makespan": s.makespan, "straggler_share": 0.0,
                "timeline": s.frame()}
    from dlsched.analyses.multiworker import simulate_workers

    r = simulate_workers(graph, times, workers=workers, priorities=priorities, iterations=iterations, seed=seed,
                         jitter=jitter, sharing=sharing, keep_timeline=keep_timeline, progress=report)
    summary = r.summary()
    pw = r.per_worker.groupby("worker").agg(makespan=("makespan", "mean"), efficiency=("efficiency", "mean"),
                                            wait=("wait", "mean")).reset_index()
    per_iter = []
    for it, grp in r.per_worker.groupby("iteration"):
        row = r.per_iteration.iloc[int(it)]
        per_iter.append({"iteration": int(it), "iteration_time": float(row["iteration_time"]),
                         "straggler_share": float(row["straggler_share"]),
                         "makespans": [float(x) for x in grp.sort_values("worker")["makespan"]]})
    return {
        "makespan": summary["iteration_time"]["mean"],
        "first_makespan": float(r.per_iteration["iteration_time"].iloc[0]),
        "straggler_share": summary["straggler_share"]["mean"],
        "summary": {k: summary[k] for k in ("iteration_time", "straggler_share")}
        | {"worker_efficiency": summary["efficiency"]},
        "per_worker": pw.to_dict(orient="records"),
        "per_iteration": per_iter,
        "timeline": r.timeline,
    }


def _print(out, result, multi):
    from rich.table import Table

    t = Table(title=f"{out['model']} ({out['mode']}) · order: {out['algorithm']}", show_header=False,
              title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("makespan" + (" (mean iteration time)" if multi else ""), fmt_seconds(out["makespan"]))
    t.add_row("efficiency E", f"{out['efficiency']:.3f}")
    t.add_row("upper bound U (serial)", fmt_seconds(out["upper"]))
    t.add_row("lower bound L (busiest resource)", fmt_seconds(out["lower"]))
    t.add_row("best possible speedup S", f"{out['speedup']:.3f}")
    t.add_row("ops / transfers / servers", f"{out['ops']:,} / {out['transfers']:,} / {out['parameter_servers']}")
    if multi:
        t.add_row("workers × iterations", f"{out['workers']} × {out['iterations']}  ({out['sharing']} links, "
                                          f"jitter {out['jitter']:g})")
        it, sh = out["iteration_time"], out["straggler_share"]
        t.add_row("iteration time mean / p50 / p95",
                  f"{fmt_seconds(it['mean'])} / {fmt_seconds(it['p50'])} / {fmt_seconds(it['p95'])}")
        t.add_row("straggler share mean / p50 / p95", f"{sh['mean']:.1%} / {sh['p50']:.1%} / {sh['p95']:.1%}")
    console.print(t)
    if multi:
        w = Table(title="per worker (mean over iterations)", title_justify="left")
        for c in ("worker", "makespan", "efficiency", "waits for slowest"):
            w.add_column(c, justify="right")
        for row in result["per_worker"]:
            w.add_row(str(row["worker"]), fmt_seconds(row["makespan"]), f"{row['efficiency']:.3f}",
                      fmt_seconds(row["wait"]))
        console.print(w)
    if "compare" in out:
        c = Table(title="orders compared" + (" (random: mean of 5 seeds)" if any(
            r["algorithm"] == "random" for r in out["compare"]) else ""), title_justify="left")
        for col in ("order", "makespan", "efficiency E", "straggler share"):
            c.add_column(col, justify="right" if col != "order" else "left")
        for r in out["compare"]:
            c.add_row(r["algorithm"], fmt_seconds(r["makespan"]), f"{r['efficiency']:.3f}",
                      f"{r['straggler_share']:.1%}")
        console.print(c)
    effs = [out["efficiency"]] + [r["efficiency"] for r in out.get("compare", [])]
    if multi and min(effs) < 0:
        console.print("E < 0: the workers share the servers' links, so an iteration can take longer than one "
                      "worker's fully serial bound U (E is measured against the single-worker bounds).")
    for key, what in (("trace", "Chrome trace"), ("plot", "Gantt chart")):
        if key in out:
            console.print(f"wrote {what} to [bold]{out[key]}[/]")
