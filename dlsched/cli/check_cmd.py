"""``dlsched snapshot`` and ``dlsched check``: the CI regression gate (:mod:`dlsched.answers.gate`)."""
from __future__ import annotations

import click
from click.core import ParameterSource

from .common import DURATION, FRACTION, column_table, console, emit_json, gather, model_options


def _gate(**options):
    from dlsched.answers.gate import GateOptions

    return GateOptions(**options)


def gate_options(fn):
    """Options that decide the figures, handed over as ``model`` and ``gate``; recorded in the baseline and reused
    by check."""
    fn = gather("gate", _gate, ("oracle", "device_spec", "default_time", "memory", "margin", "optimizer"))(fn)
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


@click.command()
@gate_options
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Baseline JSON to write.")
@click.option("--tolerance-for", "tolerance_for", multiple=True, metavar="METRIC=TOL",
              help="Per-metric tolerance stored in the baseline, e.g. tac_makespan=5%.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def snapshot(model, gate, output, tolerance_for, as_json):
    """Record MODEL's figures as a CI baseline (deterministic: analytic oracle by default).

    Records op counts by type, parameter count and bytes, transfer counts, the
    bounds U, L and S, the critical path, the makespan and efficiency of TAC and
    of random order (mean over fixed seeds), the largest batch for --memory, the
    fingerprint and the dlsched version.
    """
    from dlsched.answers.snapshot import snapshot as answer

    snap = answer(model, gate, tolerance_for, output)
    if as_json:
        emit_json({"output": output, **snap.doc})
        return
    console.print(column_table(f"baseline for {snap.graph.name} ({snap.graph.mode}) → {output}", ("metric", "value"),
                               [(k, _fmt(v)) for k, v in snap.doc["metrics"].items()], left=("metric",)))


@click.command()
@gate_options
@click.option("--baseline", required=True, type=click.Path(dir_okay=False), help="Baseline JSON from snapshot.")
@click.option("--tolerance", default="2%", show_default=True, help="Relative change allowed per metric.")
@click.option("--tolerance-for", "tolerance_for", multiple=True, metavar="METRIC=TOL",
              help="Per-metric tolerance, e.g. param_count=0 or tac_makespan=5%.")
@click.option("--junit", type=click.Path(dir_okay=False), help="Also write a JUnit XML report.")
@click.option("--update", is_flag=True, help="Rewrite the baseline with the current figures.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check(model, gate, baseline, tolerance, tolerance_for, junit, update, as_json):
    """Compare MODEL against a baseline; exit 1 when a metric regresses beyond tolerance.

    The figures are recomputed with the options recorded in the baseline
    (oracle or device spec, memory, mode, batch, servers); any of them given
    here overrides the recorded one.
    """
    from dlsched.answers.check import check as answer
    from dlsched.answers.gate import OPTION_KEYS

    ctx = click.get_current_context()
    # An option overrides the baseline's only when given on the command line, not by its default.
    given = {k for k in OPTION_KEYS if ctx.get_parameter_source(k) not in (None, ParameterSource.DEFAULT)}
    result = answer(baseline, model, gate, given, tolerance, tolerance_for, update, junit)
    if as_json:
        emit_json({"baseline": baseline, **result.to_dict()})
    else:
        _print_check(result, baseline)
    if result.exit_code:
        raise SystemExit(result.exit_code)


def _print_check(result, baseline: str) -> None:
    style = {"REGRESSED": "bold red", "improved": "green", "changed": "yellow"}
    rows = [(r.metric, _fmt(r.baseline), _fmt(r.now), "" if r.change is None or r.change != r.change else
             f"{r.change:+.2%}", f"[{style[r.verdict]}]{r.verdict}[/]" if r.verdict in style else r.verdict)
            for r in result.table.itertuples(index=False)]
    console.print(column_table(f"dlsched check: {result.graph.name} against {baseline}",
                               ("metric", "baseline", "now", "change", "verdict"), rows, left=("metric", "verdict")))
    if result.note:
        console.print(f"[yellow]note:[/] {result.note}")
    if result.updated:
        console.print(f"baseline {baseline} updated")
    elif result.regressed:
        console.print(f"[bold red]{len(result.regressed)} metric(s) regressed:[/] {', '.join(result.regressed)}")
    else:
        console.print("[green]no regression[/]")


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) > 1000):
        return f"{int(v):,}"
    return f"{v:.6g}"
