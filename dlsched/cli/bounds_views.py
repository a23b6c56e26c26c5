"""Tables of ``dlsched bounds``: a model's bounds and loads, and a trace's iterations and workers rated."""
from __future__ import annotations

from .common import column_table, console, fmt_efficiency, fmt_seconds, key_value_table

#: Iterations listed one per row; beyond that the table shows the first and last ones (all are in --json).
MAX_ROWS = 20


def fmt_model_error(err: float, bound: float) -> str:
    """``+1.20 ms (+4.1%)`` of a time beyond a bound; empty inside the bounds."""
    if not err:
        return ""
    share = f" ({err / bound:+.1%})" if bound else ""
    return f"{'+' if err > 0 else '−'}{fmt_seconds(abs(err))}{share}"


def print_bounds(report, from_trace: bool) -> None:
    """The model's bounds, the makespan's E (or its model error) and the load per resource."""
    from rich.table import Table

    out, b, rating, dep_rating = report.figures, report.bounds, report.rating, report.dependency_rating
    rows = [("upper bound U (all serial)", fmt_seconds(b.upper)),
            ("lower bound L (busiest resource)", fmt_seconds(b.lower)),
            ("dependency-aware lower bound L_dep",
             f"{fmt_seconds(out['dependency_lower'])}  (binding: {out['dependency_resource']})"),
            ("best-case speedup S", f"{b.speedup:.3f}  ({b.speedup * 100:.1f}%)")]
    if rating is not None:
        rows.append(("makespan" + (" (trace)" if from_trace else ""), fmt_seconds(out["makespan"])))
        rows.append(("scheduling efficiency E", f"{rating.efficiency:.3f}" if rating.efficiency is not None
                     else "— (model error, see below)"))
        if dep_rating.efficiency is not None:
            rows.append(("efficiency against L_dep", f"{dep_rating.efficiency:.3f}"))
    console.print(key_value_table(f"{out['model']} ({out['mode']}): makespan bounds", rows))
    loads = Table(title="load per resource", title_justify="left")
    for col in ("resource", "ops", "load", "share of U"):
        loads.add_column(col, justify="left" if col == "resource" else "right")
    for row in b.frame().itertuples(index=False):
        loads.add_row(row.resource, f"{row.ops:,}", fmt_seconds(row.load), f"{row.share * 100:.1f}%")
    console.print(loads)
    if rating is not None and rating.efficiency is None:
        side = "above U" if rating.model_error > 0 else "below L"
        console.print(f"[yellow]model error:[/] the makespan lies {fmt_seconds(abs(rating.model_error))} {side}, "
                      "outside [L, U], so no efficiency is given: the oracle's times and the measured iteration "
                      "do not describe the same run (other device, batch or overheads)")


def print_trace(rated, path) -> None:
    """Each iteration's time, E_W and straggler share; each worker's mean makespan and own E."""
    s, pi = rated.summary(), rated.per_iteration
    it, sh = s["iteration_time"], s["straggler_share"]
    rows = [("workers × iterations", f"{s['workers']} × {s['iterations']}"),
            ("iteration time mean / p50 / p95",
             f"{fmt_seconds(it['mean'])} / {fmt_seconds(it['p50'])} / {fmt_seconds(it['p95'])}"),
            ("efficiency E_W mean (all workers' bounds)", fmt_efficiency(s["efficiency"]["mean"])),
            ("straggler share mean / p50 / p95", f"{sh['mean']:.1%} / {sh['p50']:.1%} / {sh['p95']:.1%}"),
            ("iterations outside their bounds", f"{s['model_errors']} of {s['iterations']}")]
    if "predicted_efficiency" in s:
        rows.append(("E_W against the oracle's bounds", fmt_efficiency(s["predicted_efficiency"]["mean"])))
    console.print(key_value_table(f"trace {path}: measured iterations", rows))
    shown = pi if len(pi) <= MAX_ROWS else pi.iloc[list(range(MAX_ROWS // 2)) + list(range(len(pi) - MAX_ROWS // 2,
                                                                                         len(pi)))]
    more = f" ({MAX_ROWS} of {len(pi)} shown; all in --json)" if len(pi) > MAX_ROWS else ""
    console.print(column_table(
        "per iteration" + more, ("iteration", "time T", "E_W", "straggler share", "model error"),
        [(str(r.iteration), fmt_seconds(r.iteration_time), fmt_efficiency(r.efficiency), f"{r.straggler_share:.1%}",
          fmt_model_error(r.model_error, r.upper if r.model_error > 0 else r.lower))
         for r in shown.itertuples(index=False)]))
    pw = rated.per_worker.groupby("worker").agg(makespan=("makespan", "mean"), efficiency=("efficiency", "mean"),
                                                errors=("model_error", lambda v: int((v != 0).sum())),
                                                wait=("wait", "mean")).reset_index()
    console.print(column_table(
        "per worker (mean over iterations; own E from its realised op times)",
        ("worker", "makespan", "own E", "waits for slowest", "iterations outside own bounds"),
        [(str(r.worker), fmt_seconds(r.makespan), fmt_efficiency(r.efficiency), fmt_seconds(r.wait), str(r.errors))
         for r in pw.itertuples(index=False)]))
    if s["worker_model_errors"]:
        console.print("A worker outside its own bounds sat idle while its transfers queued behind other workers' "
                      "(or its time holds work the trace does not show): no E, only the size of the gap.")
