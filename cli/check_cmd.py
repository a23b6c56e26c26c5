"""``dlsched snapshot`` and ``dlsched check``: the CI regression gate."""
from __future__ import annotations

import click
from click.core import ParameterSource

from .common import DURATION, FRACTION, console, emit_json, load_graph, model_options

_OPTION_KEYS = ("mode", "batch", "ps", "ps_strategy", "buffers", "device_spec", "oracle", "default_time",
                "memory", "margin", "optimizer")


def gate_options(fn):
    """Options that decide the figures; recorded in the baseline and reused by check."""
    fn = click.option("--optimizer", type=click.Choice(["sgd", "momentum", "adam"]), default=None,
                      help="Optimizer state counted by the batch plan [default: sgd].")(fn)
    fn = click.option("--margin", type=FRACTION, default=None,
                      help="Memory headroom, e.g. 0.1 or 10% [default: 0.1].")(fn)
    fn = click.option("--memory", default=None, help="Device memory for the largest-batch figure, e.g. 16GiB.")(fn)
    fn = click.option("--default-time", type=DURATION, default=None,
                      help="Time for ops the oracle lacks, e.g. 1us (otherwise they are an error).")(fn)
    fn = click.option("--device-spec", default=None,
                      help="Analytic oracle device: cpu, a100, h100 or a YAML file [default: cpu].")(fn)
    fn = click.option("--oracle", type=click.Path(dir_okay=False), default=None,
                      help="Use this oracle file instead of the analytic estimate.")(fn)
    return model_options(fn)


def _snapshot(options: dict) -> tuple[dict, object]:
    """Recompute every figure for ``options['model']``; returns (baseline document, graph)."""
    from dlsched import __version__
    from dlsched.analyses.regression import model_metrics
    from dlsched.errors import DlschedError

    graph = load_graph(**options)
    if options.get("oracle"):
        from dlsched.exporters.oracle_file import load_times
        times = load_times(options["oracle"], graph, options.get("default_time"))
    else:
        from dlsched.profiling.analytic import analytic_oracle
        from dlsched.profiling.device_specs import load_device_spec
        from dlsched.exporters.oracle_file import oracle_times
        df, untimed = analytic_oracle(graph, load_device_spec(options.get("device_spec") or "cpu"))
        if untimed and options.get("default_time") is None:
            kinds = sorted({graph.op(n).op_type for n in untimed})
            raise DlschedError(
                f"the analytic oracle cannot cost {len(untimed)} op(s) of {graph.name!r} (op types: "
                f"{', '.join(kinds[:10])}); e.g. {', '.join(list(untimed)[:5])}. Pass --default-time SECONDS "
                "to give them a fixed time, or use --oracle with a profiled oracle.")
        times = oracle_times(df, graph, options.get("default_time"), where="analytic oracle")
    largest = None
    if options.get("memory"):
        from dlsched.planning.batch import plan_batch
        from dlsched.planning.memory import static_estimate
        from dlsched.units import parse_bytes

        # The memory model reads the backward pass's liveness, so it needs the training graph.
        train = graph if graph.mode == "training" else load_graph(**{**options, "mode": "training"})
        estimate = static_estimate(train, optimizer=options.get("optimizer") or "sgd")
        largest = plan_batch(estimate, parse_bytes(options["memory"]), options.get("margin") or 0.1).batch
    figures = model_metrics(graph, times, largest)
    doc = {
        "dlsched_version": __version__,
        "model": {"spec": options["model"], "name": graph.name, "fingerprint": graph.fingerprint(),
                  "mode": graph.mode},
        "options": {k: options.get(k) for k in _OPTION_KEYS},
        **figures,
    }
    return doc, graph


@click.command()
@gate_options
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Baseline JSON to write.")
@click.option("--tolerance-for", "tolerance_for", multiple=True, metavar="METRIC=TOL",
              help="Per-metric tolerance stored in the baseline, e.g. tac_makespan=5%.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def snapshot(output, tolerance_for, as_json, **options):
    """Record MODEL's figures as a CI baseline (deterministic: analytic oracle by default).

    Records op counts by type, parameter count and bytes, transfer counts, the
    bounds U, L and S, the critical path, the makespan and efficiency of TAC and
    of random order (mean over fixed seeds), the largest batch for --memory, the
    fingerprint and the dlsched version.
    """
    from dlsched.exporters.baseline import write_baseline

    tolerances = _parse_tolerances(tolerance_for)
    doc, graph = _snapshot(options)
    if tolerances:
        doc["tolerances"] = tolerances
    write_baseline(doc, output)
    if as_json:
        emit_json({"output": output, **doc})
        return
    from rich.table import Table

    t = Table(title=f"baseline for {graph.name} ({graph.mode}) → {output}", title_justify="left")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in doc["metrics"].items():
        t.add_row(k, _fmt(v))
    console.print(t)


@click.command()
@gate_options
@click.option("--baseline", required=True, type=click.Path(dir_okay=False), help="Baseline JSON from snapshot.")
@click.option("--tolerance", default="2%", show_default=True, help="Relative change allowed per metric.")
@click.option("--tolerance-for", "tolerance_for", multiple=True, metavar="METRIC=TOL",
              help="Per-metric tolerance, e.g. param_count=0 or tac_makespan=5%.")
@click.option("--junit", type=click.Path(dir_okay=False), help="Also write a JUnit XML report.")
@click.option("--update", is_flag=True, help="Rewrite the baseline with the current figures.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check(baseline, tolerance, tolerance_for, junit, update, as_json, **options):
    """Compare MODEL against a baseline; exit 1 when a metric regresses beyond tolerance.

    The figures are recomputed with the options recorded in the baseline
    (oracle or device spec, memory, mode, batch, servers); any of them given
    here overrides the recorded one.
    """
    from dlsched.analyses.regression import compare_metrics
    from dlsched.exporters.baseline import read_baseline, write_baseline
    from dlsched.units import parse_fraction

    base = read_baseline(baseline)
    recorded = base.get("options", {})
    ctx = click.get_current_context()
    # An option overrides the baseline's only when given on the command line, not by its default.
    given = {k for k in _OPTION_KEYS if ctx.get_parameter_source(k) not in (None, ParameterSource.DEFAULT)}
    merged = {k: (options.get(k) if k in given else recorded.get(k)) for k in _OPTION_KEYS}
    merged["model"] = options["model"]
    doc, graph = _snapshot(merged)
    tolerances = {**base.get("tolerances", {}), **_parse_tolerances(tolerance_for)}
    table = compare_metrics(base["metrics"], doc["metrics"], parse_fraction(tolerance), tolerances)
    note = None
    if base["model"].get("fingerprint") != doc["model"]["fingerprint"]:
        note = (f"the model's structure changed (fingerprint {base['model'].get('fingerprint')} → "
                f"{doc['model']['fingerprint']}); priority files made for the old model no longer apply")
    regressed = table.loc[table["regressed"], "metric"].tolist()
    if junit:
        from dlsched.exporters.junit import write_junit
        write_junit(table, junit, suite=graph.name, note=note)
    if update:
        if base.get("tolerances"):
            doc["tolerances"] = base["tolerances"]
        write_baseline(doc, baseline)
    if as_json:
        emit_json({"baseline": baseline, "regressed": regressed, "note": note, "updated": update,
                   "fingerprint_changed": note is not None,
                   "metrics": table.drop(columns="regressed").to_dict(orient="records")})
    else:
        from rich.table import Table

        t = Table(title=f"dlsched check: {graph.name} against {baseline}", title_justify="left")
        for col in ("metric", "baseline", "now", "change", "verdict"):
            t.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
        style = {"REGRESSED": "bold red", "improved": "green", "changed": "yellow"}
        for r in table.itertuples(index=False):
            change = "" if r.change is None or r.change != r.change else f"{r.change:+.2%}"
            t.add_row(r.metric, _fmt(r.baseline), _fmt(r.now), change,
                      f"[{style.get(r.verdict, '')}]{r.verdict}[/]" if r.verdict in style else r.verdict)
        console.print(t)
        if note:
            console.print(f"[yellow]note:[/] {note}")
        if update:
            console.print(f"baseline {baseline} updated")
        elif regressed:
            console.print(f"[bold red]{len(regressed)} metric(s) regressed:[/] {', '.join(regressed)}")
        else:
            console.print("[green]no regression[/]")
    if regressed and not update:
        raise SystemExit(1)


def _parse_tolerances(items) -> dict[str, float]:
    from dlsched.analyses.regression import METRICS
    from dlsched.errors import DlschedError
    from dlsched.units import parse_fraction

    out = {}
    for item in items:
        if "=" not in item:
            raise DlschedError(f"--tolerance-for expects METRIC=TOL, got {item!r}")
        name, tol = item.split("=", 1)
        if name not in METRICS:
            raise DlschedError(f"unknown metric {name!r} in --tolerance-for; known: {', '.join(METRICS)}")
        out[name] = parse_fraction(tol)
    return out


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v != v:
        return "-"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) > 1000):
        return f"{int(v):,}"
    return f"{v:.6g}"
