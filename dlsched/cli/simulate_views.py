"""``dlsched simulate``'s data-parallel options and its tables (orders, and collectives side by side)."""
from __future__ import annotations

from dataclasses import dataclass

import click

from dlsched.answers.collectives import Network, Step

from .common import (BANDWIDTH, DURATION, POSITIVE_DURATION, POSITIVE_FLOAT, Quantity, column_table, console,
                     fmt_bytes, fmt_efficiency, fmt_seconds, gather, key_value_table)


@dataclass(frozen=True)
class CollectiveArgs:
    """The data-parallel options as given: which collective, the step, the network, the imbalance, the activation."""

    kind: str | None
    step: Step
    network: Network
    imbalance: str | None
    activation: str
    sync_every: int = 0

    @property
    def asked(self) -> bool:
        """An option that only the collectives take was given."""
        return bool(self.kind) or self.step.time is not None or self.imbalance is not None or self.sync_every > 0 \
            or self.step.phase is not None or self.network.activation is not None


def _collective_args(collective, step_time, collective_phase, imbalance, bucket_mb, gradient_size, algorithm,
                     latency, bandwidth, activation_cost, activation, sync_every):
    return CollectiveArgs(collective, Step(step_time, gradient_size, int(bucket_mb * 1024**2), collective_phase),
                          Network(latency, bandwidth, algorithm, activation_cost), imbalance, activation, sync_every)


def collective_options(fn):
    """--collective, --step-time, --imbalance and the all-reduce's cost model (DESIGN §4.8), as ``collective``."""
    from dlsched.analyses.allreduce_sim import ACTIVATIONS, COLLECTIVES
    from dlsched.analyses.collective_cost import ALGORITHMS

    fn = gather("collective", _collective_args, ("collective", "step_time", "collective_phase", "imbalance",
                                                 "bucket_mb", "gradient_size", "algorithm", "latency", "bandwidth",
                                                 "activation_cost", "activation", "sync_every"))(fn)
    options = [
        click.option("--collective", type=click.Choice(COLLECTIVES), default=None,
                     help="Data-parallel all-reduce instead of parameter servers: synchronous, or eager-SGD's "
                          "solo/majority partial all-reduce (--compare allreduce,solo,majority: side by side)."),
        click.option("--step-time", type=POSITIVE_DURATION, default=None,
                     help="Replay a step of this many seconds without a model (MODEL and --oracle optional)."),
        click.option("--collective-phase", type=DURATION, default=None,
                     help="--step-time: the part of the step that is the all-reduce, the wait a late process skips "
                          "and so recovers its delay by (e.g. 50ms) [default: the α–β cost, on top of the step]."),
        click.option("--imbalance", default=None,
                     help="random:k=1:delay=200ms, skew:linear:1ms:32ms, rotate:50ms:400ms, speed:1,1,2,…, "
                          "lognormal:mean=M:sd=S:min=A:max=B, trace:FILE.csv [default: none]."),
        click.option("--bucket-mb", type=POSITIVE_FLOAT, default=25.0, show_default=True,
                     help="DDP gradient bucket cap (MiB)."),
        click.option("--gradient-size", type=Quantity("bytes", positive=False), default=0,
                     help="--step-time: bytes all-reduced per step [default: 0]."),
        click.option("--algorithm", type=click.Choice(ALGORITHMS), default="ring", show_default=True),
        click.option("--latency", type=DURATION, default=None,
                     help="Network α [default: fitted to the oracle's transfers; 50us with --step-time]."),
        click.option("--bandwidth", type=BANDWIDTH, default=None,
                     help="Network β [default: fitted to the oracle's transfers; 10Gbps with --step-time]."),
        click.option("--activation-cost", type=DURATION, default=None,
                     help="What activating a late process costs (a real run's, from train-allreduce --json) "
                          "[default: ⌈log2 P⌉·α, eager-SGD's binomial trees]."),
        click.option("--activation", type=click.Choice(ACTIVATIONS), default="free-running", show_default=True,
                     help="free-running processes (training), or a barrier per iteration (micro-benchmarks)."),
        click.option("--sync-every", type=click.IntRange(min=0), default=0, show_default=True,
                     help="The limiter of eager-SGD's code: every N-th solo or majority round is synchronous "
                          "(0: never)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def print_collectives(out: dict) -> None:
    """The collectives side by side, then each one's iteration time per process."""
    what = out.get("model", f"compute {fmt_seconds(out['step_compute_s'])}")
    console.print(key_value_table(
        f"{what} · {out['workers']} processes × {out['iterations']} steps · {out['activation']}",
        [("imbalance", out["imbalance"]),
         ("gradients", f"{fmt_bytes(out['gradient_bytes'])} in {out['buckets']} bucket(s)"),
         (f"{out['algorithm']} all-reduce (α {fmt_seconds(out['alpha_s'])}, β {fmt_bytes(out['beta_Bps'])}/s)"
          if out["collective_phase_s"] is None else "collective phase (given)",
          f"{fmt_seconds(out['allreduce_s'])} + activation {fmt_seconds(out['activation_s'])}"),
         ("limiter", f"every {out['sync_every']}th round synchronous" if out["sync_every"] else "none")]))
    cols = out["collectives"]
    console.print(column_table(
        f"collectives compared (NAP of {out['workers']})",
        ("", "steps/s", "speedup", "iteration", "latency", "NAP", "lag (max)", "age (max)", "missed"),
        [(k, f"{c['steps_per_s']:.3f}", f"{c['speedup']:.2f}×" if "speedup" in c else "–",
          fmt_seconds(c["mean_iteration_s"]), fmt_seconds(c["mean_latency_s"]), f"{c['mean_nap']:.2f}",
          f"{c['mean_staleness']:.2f} ({c['max_staleness']})",
          f"{c['mean_version_staleness']:.2f} ({c['max_version_staleness']})", f"{c['missed_rate']:.1%}")
         for k, c in cols.items()], left=("",)))
    console.print(column_table(
        "iteration time per process", ("process",) + tuple(cols),
        [(str(p),) + tuple(fmt_seconds(c["iteration_s_per_process"][p]) for c in cols.values())
         for p in range(out["workers"])]))
    console.print("NAP: processes contributing fresh gradients; lag: steps between a gradient's step and its round; "
                  "model age: rounds completed between the start of a gradient's step and the round that applies "
                  "it (Lemma 6.1's τ); missed: results a process never read (overwritten).")


def print_orders(report) -> None:
    """The parameter-server simulation: makespan, E, bounds; per worker and orders compared."""
    from dlsched.analyses.compare import RANDOM_SEEDS

    out, multi = report.figures, report.multi
    rows = [("makespan" + (" (mean iteration time)" if multi else ""), fmt_seconds(out["makespan"])),
            ("efficiency E", f"{out['efficiency']:.3f}"),
            ("efficiency against L_dep", f"{out['dependency_efficiency']:.3f}"),
            (f"upper bound {'U_W' if multi else 'U'} (serial)", fmt_seconds(out["upper"])),
            (f"lower bound {'L_W' if multi else 'L'} (busiest resource)", fmt_seconds(out["lower"])),
            ("dependency-aware lower bound L_dep", fmt_seconds(out["dependency_lower"])),
            ("best possible speedup S", f"{out['speedup']:.3f}"),
            ("ops / transfers / servers", f"{out['ops']:,} / {out['transfers']:,} / {out['parameter_servers']}")]
    if multi:
        it, sh = out["iteration_time"], out["straggler_share"]
        rows += [("workers × iterations", f"{out['workers']} × {out['iterations']}  ({out['sharing']} links, "
                                          f"jitter {out['jitter']:g})"),
                 ("iteration time mean / p50 / p95",
                  f"{fmt_seconds(it['mean'])} / {fmt_seconds(it['p50'])} / {fmt_seconds(it['p95'])}"),
                 ("straggler share mean / p50 / p95", f"{sh['mean']:.1%} / {sh['p50']:.1%} / {sh['p95']:.1%}")]
    console.print(key_value_table(f"{out['model']} ({out['mode']}) · order: {out['algorithm']}", rows))
    if multi:
        console.print(column_table("per worker (mean over iterations)",
                                   ("worker", "makespan", "efficiency", "waits for slowest"),
                                   [(str(r["worker"]), fmt_seconds(r["makespan"]),
                                     fmt_efficiency(r["efficiency"], r["model_error"]),
                                     fmt_seconds(r["wait"])) for r in report.run.per_worker]))
    if "compare" in out:
        mean = any(r["algorithm"] == "random" for r in out["compare"])
        console.print(column_table("orders compared" + (f" (random: mean of {RANDOM_SEEDS} seeds)" if mean else ""),
                                   ("order", "makespan", "efficiency E", "straggler share"),
                                   [(r["algorithm"], fmt_seconds(r["makespan"]), f"{r['efficiency']:.3f}",
                                     f"{r['straggler_share']:.1%}") for r in out["compare"]], left=("order",)))
    if multi and any(r["efficiency"] is None for r in report.run.per_worker):
        console.print("— (+t): the worker sat idle while its transfers queued behind other workers' on a serial "
                      "link, t longer than its own bounds count (a model error); E is rated against the bounds of "
                      "all workers sharing the links (DESIGN §4.6).")
    from dlsched.analyses.multiworker import TIMELINE_ROWS
    for key, what in (("trace", "Chrome trace"), ("plot", "Gantt chart")):
        if key in out:
            kept = out.get("trace_iterations") if key == "trace" else None
            some = f" (the first {kept} of {out['iterations']} iterations: the trace keeps at most " \
                   f"{TIMELINE_ROWS:,} ops)" if kept is not None and kept < out["iterations"] else ""
            console.print(f"wrote {what} to [bold]{out[key]}[/]{some}")
