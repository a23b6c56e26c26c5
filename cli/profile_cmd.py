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

import click
from click.core import ParameterSource

from dlsched import limits

from .common import (BANDWIDTH, DURATION, NONNEG_INT, POSITIVE_INT, FiniteFloat, console, emit_json, err_console,
                     fmt_bytes, fmt_seconds, load_graph, max_work_option, model_options, progress)


def _profiler(fmt: str):
    """The framework profiler for a model format, as ``fn(model, graph, **kw)``."""
    from dlsched.errors import DlschedError

    names = {"torch": ("dlsched.profiling.torch_profiler", "profile_torch"),
             "onnx": ("dlsched.profiling.onnx_profiler", "profile_onnx"),
             "graphdef": ("dlsched.profiling.tf_profiler", "profile_tf"),
             "savedmodel": ("dlsched.profiling.tf_profiler", "profile_tf")}
    mod, attr = names[fmt]
    import importlib

    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError):
        raise DlschedError(f"profiling {fmt} models is not available in this installation ({mod}.{attr} is "
                           "missing); use --from-trace with an existing trace instead") from None


@click.command()
@model_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="oracle.csv", show_default=True,
              help="Oracle file to write: CSV, or Parquet when it ends in .parquet.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--runs", type=POSITIVE_INT, default=5, show_default=True,
              help="Timed runs per op (the minimum is kept, the median stored).")
@click.option("--warmup", type=NONNEG_INT, default=1, show_default=True, help="Untimed runs first.")
@click.option("--bandwidth", type=BANDWIDTH, default="10Gbps", show_default=True,
              help="Link bandwidth for transfers: bps/Kbps/Mbps/Gbps, B/s, MB/s, MiB/s …")
@click.option("--latency", type=DURATION, default="50us", show_default=True,
              help="Per-transfer latency: s, ms, us, ns.")
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
def profile(output, device, runs, warmup, bandwidth, latency, measure_network, peer, network_timeout, trace,
            analytic, device_spec, default_time, max_work, as_json, **model_kw):
    """Build MODEL's time oracle: Time(op) for every op, written to -o.

    Compute ops run on --device with the framework's profiler (warm-up, then
    --runs runs; minimum kept, median stored), or come from --from-trace.
    Transfers (recv/send) cost latency + bytes/bandwidth. Ops that cannot be
    timed are listed with the reason; the oracle is written anyway, and the
    analyses then need --default-time (or pass it here). More than --max-work
    op runs (compute ops × (runs + warm-up)) are refused before anything runs.
    """
    from dlsched.errors import DlschedError
    from dlsched.loader import detect_format

    if peer and not measure_network:
        raise DlschedError("--peer needs --measure-network")
    bw, lat, dflt = bandwidth, latency, default_time
    runs_model = not (trace or analytic)  # only then do --runs and --warmup run anything
    if runs_model:  # before the model loads: --runs 1000000000 is refused at once
        limits.check_work(limits.profile_work(None, runs, warmup), limits.PROFILE, "profile", max_work)
    peer_addr = None
    if peer:
        host, _, port = peer.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise DlschedError(f"--peer {peer!r}: expected HOST:PORT, e.g. 127.0.0.1:29555")
        peer_addr = (host.strip("[]"), int(port))

    if analytic and trace:
        raise DlschedError("--analytic and --from-trace are two different sources of times; give one")
    spec = None
    if analytic:
        from dlsched.profiling.device_specs import load_device_spec

        spec = load_device_spec(device_spec)
        ctx = click.get_current_context()
        if ctx.get_parameter_source("bandwidth") == ParameterSource.DEFAULT:
            bw = spec.network_bandwidth
        if ctx.get_parameter_source("latency") == ParameterSource.DEFAULT:
            lat = spec.network_latency
    fmt = detect_format(model_kw["model"])
    if fmt == "dag" and not trace and not analytic:
        raise DlschedError(f"{model_kw['model']}: a .dag.json holds no runnable model, so it cannot be profiled; "
                           "pass --from-trace with a trace of the model, or profile the original model file")
    graph = load_graph(**model_kw)
    if runs_model:
        limits.check_work(limits.profile_work(len(graph.compute_ops()), runs, warmup), limits.PROFILE, "profile",
                          max_work)

    coverage = None
    if trace:
        from dlsched.profiling.trace_import import import_trace

        result = import_trace(trace, graph)
        compute, untimed, coverage = result.frame, result.untimed, result.coverage
    # The network before the (long) profile, so a dead peer fails in seconds.
    network = {"source": "flags", "bandwidth": bw, "latency": lat}
    if measure_network:
        from dlsched.profiling import network as net

        if not as_json:
            err_console.print(f"measuring the network to {peer or 'a local peer process'} …")
        m = (net.measure_peer(*peer_addr, timeout=network_timeout) if peer_addr
             else net.measure_local(timeout=network_timeout))
        bw, lat = m.bandwidth, m.latency
        network = {"source": "measured", **m.to_dict()}

    if analytic:
        from dlsched.profiling.analytic import analytic_oracle

        estimate, untimed = analytic_oracle(graph, spec)
        compute = estimate[estimate["resource"] == "compute:0"]
        network["source"] = f"device spec {spec.name}" if network["source"] == "flags" else network["source"]
    elif not trace:
        fn = _profiler(fmt)
        with progress(f"profiling {graph.name} on {device}", unit="runs") as bar:
            compute, untimed = fn(model_kw["model"], graph, device=device, runs=runs, warmup=warmup,
                                  progress=bar)

    from dlsched.exporters.oracle_file import write_oracle
    from dlsched.profiling.oracle import assemble_oracle

    res = assemble_oracle(graph, compute, untimed, bw, lat, default_time=dflt)
    summary = res.summary(graph)
    # Ops run inside another op's fused kernel: a row with time 0, reported as such, not as a gap.
    fused = {k: v for k, v in (compute.attrs.get("fused", {}) if compute is not None else {}).items()
             if k in res.frame["op"].values}
    if analytic:  # the transfers come from the device spec's network, part of the same estimate
        res.frame.loc[res.frame["source"] == "network-model", "source"] = "analytic"
    write_oracle(res.frame, output)
    info = {"output": str(output), "model": graph.name, "mode": graph.mode,
            "device": f"analytic:{spec.name}" if analytic else device,
            "runs": runs if not (trace or analytic) else None, **summary, "fused": fused, "network": network,
            "default_time": dflt}
    if coverage is not None:
        info["trace"] = {"file": str(trace), **coverage}
    if as_json:
        emit_json(info)
        return
    _print_report(info, res, graph)


def _print_report(info: dict, res, graph) -> None:
    from rich.table import Table

    t = Table(title=f"slowest ops of {graph.name} ({graph.mode})", title_justify="left")
    for col, just in (("op", "left"), ("type", "left"), ("time", "right"), ("source", "left")):
        t.add_column(col, justify=just)
    for row in info["slowest"]:
        t.add_row(row["op"], str(row["op_type"]), fmt_seconds(row["time"]), row["source"])
    console.print(t)
    s = Table(show_header=False, title="oracle", title_justify="left")
    s.add_column(style="bold")
    s.add_column(justify="right")
    s.add_row("compute ops timed", f"{info['timed']:,} of {info['compute_ops']:,}")
    if info["fused"]:
        s.add_row("fused into another op's kernel", f"{len(info['fused']):,} (time 0, listed below)")
    s.add_row("total compute time", fmt_seconds(info["total_compute_time"]))
    s.add_row("transfers", f"{info['transfers']:,} ({fmt_bytes(info['transfer_bytes'])})")
    s.add_row("total transfer time", fmt_seconds(info["total_transfer_time"]))
    src = info["network"]["source"]
    s.add_row("bandwidth", f"{info['bandwidth'] * 8 / 1e9:.3f} Gbps ({src})")
    s.add_row("latency", f"{fmt_seconds(info['latency'])} ({src})")
    if "trace" in info:
        tr = info["trace"]
        s.add_row("trace coverage", f"{tr['matched']:,} of {tr['compute_ops']:,} compute ops "
                                    f"({tr['fraction']:.0%}), {tr['iterations']} iteration(s), {tr['matcher']} matcher")
        s.add_row("unknown trace events", f"{tr['unknown_event_count']:,}")
    s.add_row("written to", info["output"])
    console.print(s)
    if "trace" in info and info["trace"]["unknown_events"]:
        names = ", ".join(f"{k} ×{v}" for k, v in list(info["trace"]["unknown_events"].items())[:10])
        err_console.print(f"trace events that matched no op: {names}")
    if info["fused"]:
        f = Table(title="ops fused into another op's kernel (time 0; the kernel's time is on the op named)",
                  title_justify="left")
        f.add_column("op")
        f.add_column("reason")
        for name, why in list(info["fused"].items())[:20]:
            f.add_row(name, why)
        if len(info["fused"]) > 20:
            f.add_row(f"… {len(info['fused']) - 20} more", "")
        console.print(f)
    missing = res.defaulted or res.untimed
    if missing:
        u = Table(title=("ops given --default-time" if res.defaulted else "ops that could not be timed"),
                  title_justify="left")
        u.add_column("op")
        u.add_column("reason")
        for name, why in list(missing.items())[:20]:
            u.add_row(name, why)
        if len(missing) > 20:
            u.add_row(f"… {len(missing) - 20} more", "")
        err_console.print(u)
    if res.untimed:
        names = ", ".join(list(res.untimed)[:10]) + (" …" if len(res.untimed) > 10 else "")
        err_console.print(f"[yellow]warning:[/] {len(res.untimed)} compute op(s) have no time ({names}); the oracle "
                          "was written without them and analyses will need --default-time (or re-run profile "
                          "with --default-time).", soft_wrap=True)
