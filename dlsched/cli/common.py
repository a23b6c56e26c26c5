"""Shared by the commands: numeric option types, --max-work, progress bars, model and oracle options, JSON, tables."""
from __future__ import annotations

import contextlib
import functools
import json
import math
import sys
import time
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterator

import click
from rich.console import Console

from dlsched.units import parse_quantity  # the commands' numbers with units; re-exported here

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)


# -- numeric option types ------------------------------------------------------
# Values that mean nothing (zero workers, a negative bandwidth, NaN, inf, a
# margin of 150%) are refused where click parses them: exit 2, naming the option,
# before any model is loaded. One type per kind of value, shared by every command.

#: Counts of things that must exist: workers, iterations, runs, batch sizes, servers.
POSITIVE_INT = click.IntRange(min=1)
#: Counts that may be zero: warm-up runs.
NONNEG_INT = click.IntRange(min=0)
#: Seeds: numpy's generators refuse negative seeds.
SEED = click.IntRange(min=0)


class FiniteFloat(click.FloatRange):
    """:class:`click.FloatRange` that also refuses NaN and ±inf (no dlsched option means anything by them)."""

    name = "number"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)  # NaN slips through range checks: every comparison is False
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


#: Non-negative finite reals: ratios, jitter, seconds of a time limit.
NONNEG_FLOAT = FiniteFloat(min=0)
#: Positive finite reals: a speedup, a speed factor.
POSITIVE_FLOAT = FiniteFloat(min=0, min_open=True)


class Quantity(click.ParamType):
    """A click type for :func:`parse_quantity`: ``--memory 16GiB`` arrives as ``17179869184``."""

    def __init__(self, kind: str, positive: bool = True):
        self.kind, self.positive = kind, positive
        self.name = {"bytes": "size", "bandwidth": "rate", "duration": "time", "fraction": "fraction"}[kind]

    def convert(self, value, param, ctx):
        from dlsched.errors import DlschedError

        if isinstance(value, (int, float)) and not isinstance(value, bool):  # a default already parsed
            return value
        try:
            return parse_quantity(self.kind, value, positive=self.positive)
        except DlschedError as e:
            self.fail(str(e), param, ctx)


#: Memory sizes and parameter bytes (``16GiB``; zero means nothing).
BYTES = Quantity("bytes")
#: Link rates (``10Gbps``, ``500MiB/s``).
BANDWIDTH = Quantity("bandwidth")
#: Durations that may be zero (latency, a default op time).
DURATION = Quantity("duration", positive=False)
#: Durations that must be positive (a round of computation).
POSITIVE_DURATION = Quantity("duration")
#: A headroom fraction in [0, 1): ``0.1`` or ``10%``.
FRACTION = Quantity("fraction")


class WorkCount(click.ParamType):
    """A positive whole count that may be written ``20000000``, ``2e7`` or ``20_000_000``."""

    name = "count"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            try:
                d = Decimal(str(value).strip().replace("_", ""))
            except InvalidOperation:
                self.fail(f"{value!r} is not a count (e.g. 50000000 or 5e7).", param, ctx)
            if not d.is_finite() or d != d.to_integral_value():
                self.fail(f"{value!r} is not a whole, finite count.", param, ctx)
            n = int(d)
        if n < 1:
            self.fail(f"{value!r} must be at least 1.", param, ctx)
        return n


def link_options(fn):
    """``--bandwidth``, ``--latency``, ``--measure-network``, ``--network-timeout``: a data-parallel job's
    network, given, measured, or (neither) fitted to the oracle's transfers (``plan-ddp``, ``plan-fsdp``)."""
    options = [
        click.option("--bandwidth", type=BANDWIDTH, default=None,
                     help="Link bandwidth β: bps/Gbps, B/s, MB/s … [default: fitted to the oracle's transfers]."),
        click.option("--latency", type=DURATION, default=None,
                     help="Per-message latency α: s, ms, us [default: fitted to the oracle's transfers]."),
        click.option("--measure-network", is_flag=True,
                     help="Measure α and β with a real gloo transfer to a local process instead."),
        click.option("--network-timeout", type=FiniteFloat(min=0.5), default=30.0, show_default=True,
                     help="Seconds any wait of the network measurement may take."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def max_work_option(*budgets):
    """``--max-work N``: the one option that raises every work budget of :mod:`dlsched.limits`.

    Parameters
    ----------
    *budgets : dlsched.limits.Budget
        The budgets of the command, listed with their defaults in ``--help``.
    """
    defaults = "; ".join(f"{b.limit:,} {b.unit}" for b in budgets)

    def decorate(fn):
        return click.option("--max-work", type=WorkCount(), default=None,
                            help="Largest work accepted, in the unit a refusal names; work above it is refused "
                                 f"before it starts [default: {defaults}].")(fn)
    return decorate


# -- progress ------------------------------------------------------------------

#: Work shorter than this shows no bar: quick commands print only their result.
PROGRESS_DELAY_S = 2.0


class WorkProgress:
    """A rich progress bar on stderr that appears only once work has run :data:`PROGRESS_DELAY_S`.

    Call it as ``report(done, total=None)`` (the ``progress`` callback the
    library's long functions take); :meth:`part` gives the callback for one of
    several runs that share the bar. Nothing is drawn when stderr is not a
    terminal, so pipes, logs and ``--json`` stdout stay clean; the bar is
    transient and vanishes when the work ends.
    """

    def __init__(self, description: str, total: float | None = None, unit: str = "",
                 delay: float = PROGRESS_DELAY_S, console: Console | None = None):
        self.description, self.total, self.unit, self.delay = description, total, unit, delay
        self.console = console or err_console
        self.enabled = self.console.is_terminal
        self._fixed_total = total is not None
        self._t0 = time.monotonic()
        self._bar = None
        self._task = None
        self.done = 0

    def __call__(self, done: float, total: float | None = None) -> None:
        self.done = done
        if total is not None and not self._fixed_total:
            self.total = total
        if self._bar is None:
            if not self.enabled or time.monotonic() - self._t0 < self.delay:
                return
            self._start()
            if self._bar is None:
                return
        self._bar.update(self._task, completed=done, total=self.total)

    def part(self, offset: float) -> Callable[[float, float | None], None]:
        """The callback for a run whose own ``done`` counts from ``offset`` on this bar."""
        return lambda done, total=None: self(offset + done)

    def _start(self) -> None:
        from rich.errors import LiveError
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        # an 80-column terminal holds every column; time left when the total is known, else time spent
        clock = TimeRemainingColumn() if self.total is not None else TimeElapsedColumn()
        bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                       TextColumn(self.unit), clock, console=self.console, transient=True, get_time=time.monotonic)
        task = bar.add_task(self.description, total=self.total, completed=self.done, start=False)
        bar.tasks[-1].start_time = self._t0  # the bar appears late; its clock should not
        try:
            bar.start()
        except LiveError:  # another bar is on screen; this work goes without one
            self.enabled = False
            return
        self._bar, self._task = bar, task

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


@contextlib.contextmanager
def progress(description: str, total: float | None = None, unit: str = "",
             delay: float = PROGRESS_DELAY_S, console: Console | None = None) -> Iterator[WorkProgress]:
    """``with progress("simulating", total=n, unit="op-steps") as report: lib_fn(..., progress=report)``.

    See :class:`WorkProgress`; the bar is removed however the block ends.
    """
    bar = WorkProgress(description, total, unit, delay, console)
    try:
        yield bar
    finally:
        bar.close()


def gather(name: str, build: Callable[..., Any], fields: tuple[str, ...]):
    """Decorator: hand the command the options ``fields`` as one object, ``build(**those options)``, named ``name``.

    Put it directly above the function, below the options it gathers, so a
    command's signature names a few option groups (``model``, ``oracle``,
    ``cluster``) instead of every flag. ``build`` settles the defaults.
    """
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            kwargs[name] = build(**{f: kwargs.pop(f) for f in fields})
            return fn(*args, **kwargs)
        return wrapper
    return decorate


def _model_spec(model, mode, batch, ps, ps_strategy, buffers):
    """The :class:`~dlsched.answers.options.ModelSpec` of the MODEL options; --mode left at its default is unset,
    so a saved DAG keeps its own."""
    from click.core import ParameterSource

    from dlsched.answers.options import ModelSpec

    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.get_parameter_source("mode") is ParameterSource.DEFAULT:
        mode = None
    return ModelSpec(model, mode, batch, ps, ps_strategy, buffers)


def model_options(fn=None, *, required: bool = True):
    """MODEL argument plus --mode, --batch, --ps, --ps-strategy, --buffers, handed over as ``model`` (a ModelSpec).

    ``@model_options(required=False)`` makes MODEL optional (plan-cluster works from figures alone).
    """
    def decorate(fn):
        fn = gather("model", _model_spec, ("model", "mode", "batch", "ps", "ps_strategy", "buffers"))(fn)
        fn = click.option("--buffers", is_flag=True,
                          help="Also treat non-trainable state as transfers: torch buffers, ONNX BatchNorm "
                               "mean/variance.")(fn)
        fn = click.option("--ps-strategy", type=click.Choice(["round-robin", "greedy"]), default=None,
                          help="How parameters are spread over servers [default: round-robin].")(fn)
        fn = click.option("--ps", type=POSITIVE_INT, default=None, help="Number of parameter servers [default: 1].")(fn)
        fn = click.option("--batch", type=POSITIVE_INT, default=None, help="Override the batch dimension.")(fn)
        fn = click.option("--mode", type=click.Choice(["inference", "training"]), default="inference",
                          show_default=True,
                          help="Forward only, or forward + backward + gradient sends (a .dag.json keeps its own).")(fn)
        return click.argument("model", required=required)(fn)
    return decorate(fn) if fn is not None else decorate


def duration_option(ctx, param, value):
    """click callback: ``350ms`` → 0.35 (seconds); ``None`` stays ``None``."""
    if value is None:
        return None
    from dlsched.errors import DlschedError
    from dlsched.units import parse_duration

    try:
        return parse_duration(value)
    except DlschedError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


def _oracle_spec(oracle, default_time, rescale_batch):
    from dlsched.answers.options import OracleSpec

    return OracleSpec(oracle, default_time, rescale_batch)


def oracle_options(required: bool = True, oracle_help: str = "Time oracle file (CSV or Parquet: op, time in seconds)."):
    """--oracle, --default-time and --rescale-batch, shared by the analyses, handed over as ``oracle`` (OracleSpec)."""
    def decorate(fn):
        fn = gather("oracle", _oracle_spec, ("oracle", "default_time", "rescale_batch"))(fn)
        fn = click.option("--rescale-batch", is_flag=True,
                          help="Use an oracle profiled at another batch than MODEL's, its compute times scaled "
                               "linearly in batch (otherwise it is refused).")(fn)
        fn = click.option("--default-time", callback=duration_option, default=None,
                          help="Time for ops the oracle lacks, e.g. 1us (otherwise they are an error).")(fn)
        return click.option("--oracle", required=required, type=click.Path(dir_okay=False), default=None,
                            help=oracle_help)(fn)
    return decorate


def need_oracle(model, oracle, why: str) -> None:
    """MODEL without --oracle is a usage error whose message ends with ``why`` (what the oracle is for)."""
    if model.given and not oracle.given:
        raise click.UsageError(f"MODEL needs --oracle: {why}")


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _jsonable(x.item())
    return x


def emit_json(obj: dict) -> None:
    """Print exactly one JSON object on stdout."""
    sys.stdout.write(json.dumps(_jsonable(obj), indent=2) + "\n")
    sys.stdout.flush()


def fmt_seconds(s: float) -> str:
    """Human time: 1.23 s, 45.6 ms, 789 us."""
    if s is None or (isinstance(s, float) and not math.isfinite(s)):
        return "∞" if s else "-"
    a = abs(s)
    if a >= 1:
        return f"{s:.3f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_bytes(n: float) -> str:
    """Human bytes in binary units: 527.8 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n} B"


def key_value_table(title: str | None, rows: list[tuple[str, str]]):
    """A two-column table of figures: bold names, right-aligned values (every command's summary)."""
    from rich.table import Table

    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    for name, value in rows:
        t.add_row(name, value)
    return t


def exclusive(**given) -> None:
    """Refuse two options that exclude each other, the one way every command does.

    ``exclusive(makespan=m, trace=t)`` raises a usage error (exit 2) naming
    ``--makespan`` and ``--trace`` when both are set.
    """
    both = [k for k, v in given.items() if v not in (None, (), [], False)]
    if len(both) > 1:
        flags = [f"--{k.replace('_', '-')}" for k in both]
        raise click.UsageError(f"give either {' or '.join(flags)}, not both")


def column_table(title: str | None, columns: tuple[str, ...], rows, left: tuple[str, ...] = ()):
    """A table with a header: one column per name, right-aligned (figures) unless named in ``left``."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right")
    for row in rows:
        t.add_row(*row)
    return t


def fmt_efficiency(e, model_error: float = 0.0) -> str:
    """``0.913``; where there is no efficiency, ``—`` and the time outside the bounds (``— (+1.2 ms)``)."""
    if e is not None and not (isinstance(e, float) and math.isnan(e)):
        return f"{e:.3f}"
    return f"— ({'+' if model_error > 0 else '−'}{fmt_seconds(abs(model_error))})" if model_error else "—"
