"""``dlsched trace PATH...``: a job's torch.profiler traces, one per rank, read and rated (issue 28)."""
from __future__ import annotations

import click

from .common import emit_json


@click.command("trace")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--clock", type=click.Choice(["step", "shared"]), default="step", show_default=True,
              help="step: each rank's times from its own step start (ranks on several hosts); shared: the "
                   "timestamps as recorded (ranks on one host).")
@click.option("--replay/--no-replay", default=True, show_default=True,
              help="Rebuild every step as a DAG and replay it against its measured time.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def trace(paths, clock, replay, as_json):
    """Why a measured distributed step takes its time, from torch.profiler traces (one JSON per rank).

    PATHS are the trace files of one job (.json or .json.gz, as
    export_chrome_trace or tensorboard_trace_handler write them), or the
    folder holding them. Per rank and ProfilerStep: the step time, compute,
    communication, the communication not hidden behind compute, their overlap
    and idle time; TicTac's bounds U and L of the step's compute and collective
    streams and its efficiency E; the step replayed from its own events.
    Across ranks: each collective's last rank and skew, and each step's
    straggler and straggler share. Beside them, the whole-trace breakdown with
    Holistic Trace Analysis's definitions.
    """
    from dlsched.answers.trace import TraceOptions
    from dlsched.answers.trace import trace as answer

    from .trace_views import print_report

    report = answer(paths, TraceOptions(clock=clock, replay=replay))
    if as_json:
        emit_json(report.to_dict())
        return
    print_report(report)
