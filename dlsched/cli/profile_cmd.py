"""``dlsched profile MODEL -o oracle.csv``: the per-op time oracle (DESIGN §3).

Compute ops are timed by the framework profiler of MODEL's format (or read
from ``--from-trace``); every recv/send gets ``latency + bytes / bandwidth``
(defaults ``--bandwidth 10Gbps --latency 50us``, or ``--measure-network``).
Ops that TensorFlow ran inside another op's fused kernel get time 0 and are
listed as "fused into X" (X holds the kernel's time). Ops that could not be
timed are named with the reason; without
``--default-time`` the oracle is still written (exit 0, with a warning) and
the analyses will refuse it until they are given ``--default-time``.
"""
from __future__ import annotations

import functools

import click

from dlsched import limits
from dlsched.devices import DEVICES

from .common import (BANDWIDTH, DURATION, NONNEG_INT, POSITIVE_INT, FiniteFloat, column_table, console, emit_json,
                     err_console, fmt_bytes, fmt_seconds, key_value_table, load_graph, max_work_option, model_options, progress)


@click.command()
@model_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="oracle.csv", show_default=True,
              help="Oracle file to write: CSV, or Parquet when it ends in .parquet.")
@click.option("--device", type=click.Choice(list(DEVICES)), default="cpu", show_default=True)
@click.option("--runs", type=POSITIVE_INT, default=5, show_default=True,
              help="Timed runs per op (the minimum is kept, the median stored).")
@click.option("--warmup", type=NONNEG_INT, default=1, show_default=True, help="Untimed runs first.")
@click.option("--threads", type=POSITIVE_INT, default=1, show_default=True,
              help="Intra-op threads of the framework (recorded in the oracle). 1: on a shared machine more threads "
                   "make op times depend on its other load; give the cores a worker will own to time ops as it runs.")
# No click default: unset, the link is --device-spec's with --analytic, else dlsched.profiling.network's default.
@click.option("--bandwidth", type=BANDWIDTH, default=None,
              help="Link bandwidth for transfers: bps/Kbps/Mbps/Gbps, B/s, MB/s, MiB/s …  [default: 10Gbps]")
@click.option("--latency", type=DURATION, default=None, help="Per-transfer latency: s, ms, us, ns.  [default: 50us]")
@click.option("--measure-network", is_flag=True,
              help="Measure bandwidth and latency with a real gloo transfer to another process instead.")
@click.option("--peer", metavar="HOST:PORT", default=None,
              help="With --measure-network: measure to a 'dlsched net-peer' there instead of a local process.")
@click.option("--network-timeout", type=FiniteFloat(min=0.5), default=30.0, show_default=True,
              help="Seconds any wait of the network measurement may take.")
@click.option("--from-trace", "trace", type=click.Path(dir_okay=False), default=None,
              help="Take compute times from a PyTorch profiler Chrome trace or a TF timeline instead of running.")
@click.option("--analytic", is_flag=True,
              help="Estimate times from shapes with a roofline model instead of running the model (deterministic).")
@click.option("--device-spec", default="cpu", show_default=True,
              help="With --analytic: cpu, a100, h100, or a YAML spec file; transfers use its network.")
@click.option("--default-time", type=DURATION, default=None,
              help="Give ops that could not be timed this time (e.g. 10us).")
@max_work_option(limits.PROFILE)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def profile(output, as_json, **options):
    """Build MODEL's time oracle: Time(op) for every op, written to -o.

    Compute ops run on --device with the framework's profiler (warm-up, then
    --runs runs; minimum kept, median stored; ops whose runs varied are named),
    or come from --from-trace; transfers cost latency + bytes/bandwidth. The
    oracle records its batch, mode, device and threads: analyses refuse it at
    another. Ops that cannot be timed are listed with why; the analyses then
    need --default-time (or pass it here). More than --max-work op runs
    (compute ops × (runs + warm-up)) are refused before anything runs.
    """
    from dlsched.formats.oracle_file import write_oracle
    from dlsched.profiling.profile_run import profile_model

    # The options are profile_model's parameters, by name.
    built = profile_model(**options, load=load_graph, say=None if as_json else err_console.print,
                          progress=functools.partial(progress, unit="runs"))
    write_oracle(built.result.frame, output, meta=built.meta())
    info = {"output": str(output), **built.to_dict()}
    if as_json:
        emit_json(info)
        return
    _print_report(info, built.result, built.graph)


def _reasons(title: str, reasons: dict, out) -> None:
    """Up to 20 ops with why, as a table."""
    rows = list(reasons.items())[:20] + ([(f"… {len(reasons) - 20} more", "")] if len(reasons) > 20 else [])
    out.print(column_table(title, ("op", "reason"), rows, left=("op", "reason")))


def _print_report(info: dict, res, graph) -> None:
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
        rows += [("trace coverage", f"{tr['matched']:,} of {tr['compute_ops']:,} compute ops ({tr['fraction']:.0%}), "
                                    f"{tr['iterations']} iteration(s), {tr['matcher']} matcher"),
                 ("unknown trace events", f"{tr['unknown_event_count']:,}")]
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
