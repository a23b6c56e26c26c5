"""``dlsched bounds MODEL --oracle O``: makespan bounds U, L, speedup S, and efficiency E; ``--trace`` rates a run."""
from __future__ import annotations

import click

from .common import duration_option, emit_json, exclusive, model_options, need_oracle, oracle_options


@click.command()
@model_options(required=False)
@oracle_options(required=False)
@click.option("--makespan", callback=duration_option, default=None,
              help="A measured iteration time (e.g. 0.35 or 350ms) to rate with the efficiency E.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="A measured Chrome trace (JSON): its span is the makespan; a dlsched trace is also rated per "
                   "worker and iteration (no MODEL needed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def bounds(model, oracle, makespan, trace_path, as_json):
    """Makespan bounds of MODEL under a time oracle (TicTac §3.2), or a trace's iterations rated (DESIGN §4.6).

    U runs every op one after another; L keeps the busiest resource always
    busy; S = (U − L) / L is the most any transfer order can gain. With
    --makespan or --trace, also the scheduling efficiency E = (U − m) / (U − L).
    Beside L, the dependency-aware lower bound L_dep (sends wait for the
    backward, which waits for the recvs) and the efficiency against it,
    (U − m) / (U − L_dep): near 1 means no order can do much better.

    --trace of a dlsched trace (simulate --trace-out, the PyTorch hook), with
    or without MODEL: each iteration's time T, its efficiency against the
    bounds of all W workers sharing the links, each worker's makespan and
    own E from its realised op times, and the straggler share. A time outside
    its bounds gets no E but a model error, with its size.
    """
    from dlsched.answers.bounds import bounds as answer

    from .bounds_views import print_bounds, print_trace

    exclusive(makespan=makespan, trace=trace_path)
    need_oracle(model, oracle, "the bounds come from its op times")
    if not model.given and (trace_path is None or makespan is not None or oracle.given):
        raise click.UsageError("Give MODEL with --oracle (and optionally --makespan or --trace), or --trace alone "
                               "to rate a dlsched trace per worker and iteration.")
    report = answer(model, oracle, makespan, trace_path)
    if as_json:
        emit_json(report.figures)
        return
    if model.given:
        print_bounds(report, bool(trace_path))
    if report.trace is not None:
        print_trace(report.trace, trace_path)
