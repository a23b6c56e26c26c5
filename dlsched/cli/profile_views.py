"""How ``dlsched profile`` prints its oracle: the slowest ops, the figures, and the ops fused, defaulted or untimed."""
from __future__ import annotations

from .common import column_table, console, err_console, fmt_bytes, fmt_seconds, key_value_table


def _reasons(title: str, reasons: dict, out) -> None:
    """Up to 20 ops with why, as a table."""
    rows = list(reasons.items())[:20] + ([(f"… {len(reasons) - 20} more", "")] if len(reasons) > 20 else [])
    out.print(column_table(title, ("op", "reason"), rows, left=("op", "reason")))


def print_report(info: dict, res, graph) -> None:
    slowest = [(r["op"], str(r["op_type"]), fmt_seconds(r["time"]), r["source"]) for r in info["slowest"]]
    console.print(column_table(f"slowest ops of {graph.name} ({graph.mode})", ("op", "type", "time", "source"),
                               slowest, left=("op", "type", "source")))
    src, fused, tr = info["network"]["source"], info["fused"], info.get("trace")
    rows = [("batch", f"{info['batch'] or 'unknown'}{' (picked: symbolic)' if info['batch_picked'] else ''}"),
            ("compute ops timed", f"{info['timed']:,} of {info['compute_ops']:,}")]
    rows += [("intra-op threads", str(info["threads"]))] if info["threads"] else []
    if info["run_spread"] is not None:  # Σ median over Σ minimum: how much slower a typical run was
        rows.append(("spread between runs", f"median {info['run_spread']:+.0%} over the best"))
    if fused:
        rows.append(("fused into another op's kernel", f"{len(fused):,} (time 0, listed below)"))
    rows += [("total compute time", fmt_seconds(info["total_compute_time"])),
             ("transfers", f"{info['transfers']:,} ({fmt_bytes(info['transfer_bytes'])})"),
             ("total transfer time", fmt_seconds(info["total_transfer_time"])),
             ("bandwidth", f"{info['bandwidth'] * 8 / 1e9:.3f} Gbps ({src})"),
             ("latency", f"{fmt_seconds(info['latency'])} ({src})")]
    if tr:
        rows += [("trace coverage", f"{tr['time_fraction']:.1%} of the trace's {tr['time_basis']} "
                                    f"({fmt_seconds(tr['matched_time'])} of {fmt_seconds(tr['compute_time'])})"),
                 ("ops matched", f"{tr['matched']:,} of {tr['compute_ops']:,} compute ops ({tr['fraction']:.0%}), "
                                 f"{tr['iterations']} iteration(s), {tr['matcher']} matcher"
                                 + (f"; {tr['no_event_ops']:,} more timed 0 (Python bookkeeping: no event)"
                                    if tr.get("no_event_ops") else "")),
                 ("op times from", "GPU kernels each op launched (host dispatch time kept as host_time)"
                  if tr.get("times") == "gpu kernels" else "host op durations")]
        if tr.get("recompute_time"):
            rows.append(("recomputed forward ops", f"{tr['recomputed_ops']:,} ops re-run in the backward "
                                                   f"(activation checkpointing), {fmt_seconds(tr['recompute_time'])} "
                                                   "over all iterations, added to their forward op"))
        if tr.get("kernels_launched_before_trace"):
            rows.append(("kernels launched before the trace", fmt_seconds(tr["kernels_launched_before_trace"])
                         + " (their launch is not in the trace; left out)"))
        rows.append(("unknown trace events", f"{tr['unknown_event_count']:,}"))
    console.print(key_value_table("oracle", rows + [("written to", info["output"])]))
    if tr and tr["unknown_events"]:
        names = ", ".join(f"{k} ×{v}" for k, v in list(tr["unknown_events"].items())[:10])
        err_console.print(f"trace events that matched no op: {names}")
    if fused:
        _reasons("ops fused into another op's kernel (time 0; the kernel's time is on the op named)", fused, console)
    if res.defaulted or res.untimed:
        _reasons("ops given --default-time" if res.defaulted else "ops that could not be timed",
                 res.defaulted or res.untimed, err_console)
    if res.untimed:
        names = ", ".join(list(res.untimed)[:10]) + (" …" if len(res.untimed) > 10 else "")
        err_console.print(f"[yellow]warning:[/] {len(res.untimed)} compute op(s) have no time ({names}); the oracle "
                          "was written without them and analyses will need --default-time (or re-run profile "
                          "with --default-time).", soft_wrap=True)
