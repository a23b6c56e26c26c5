"""Options and helpers shared by the commands: model loading, JSON output, tables."""
from __future__ import annotations

import functools
import json
import math
import sys
from typing import Any

import click
from rich.console import Console

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)


def model_options(fn):
    """MODEL argument plus --mode, --batch, --ps, --ps-strategy, --buffers."""
    @click.argument("model")
    @click.option("--mode", type=click.Choice(["inference", "training"]), default="inference", show_default=True,
                  help="Forward only, or forward + backward + gradient sends.")
    @click.option("--batch", type=click.IntRange(min=1), default=None, help="Override the batch dimension.")
    @click.option("--ps", type=click.IntRange(min=1), default=None, help="Number of parameter servers [default: 1].")
    @click.option("--ps-strategy", type=click.Choice(["round-robin", "greedy"]), default=None,
                  help="How parameters are spread over servers [default: round-robin].")
    @click.option("--buffers", is_flag=True, help="Also treat non-trainable state as transfers: torch buffers, ONNX BatchNorm mean/variance.")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


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


def oracle_options(required: bool = True, oracle_help: str = "Time oracle file (CSV or Parquet: op, time in seconds)."):
    """--oracle and --default-time, shared by the analyses."""
    def decorate(fn):
        fn = click.option("--default-time", callback=duration_option, default=None,
                          help="Time for ops the oracle lacks, e.g. 1us (otherwise they are an error).")(fn)
        return click.option("--oracle", required=required, type=click.Path(dir_okay=False), default=None,
                            help=oracle_help)(fn)
    return decorate


def load_graph(model: str, mode: str = "inference", batch: int | None = None, ps: int | None = None,
               ps_strategy: str | None = None, buffers: bool = False, **_: Any):
    """Load MODEL with the shared options (see :func:`dlsched.loader.load_model`)."""
    from dlsched.loader import load_model

    return load_model(model, mode=mode, batch=batch, ps=ps, ps_strategy=ps_strategy, buffers=buffers)


def pop_model_kwargs(kwargs: dict) -> dict:
    """Split the shared model options out of a command's kwargs."""
    return {k: kwargs.pop(k) for k in ("model", "mode", "batch", "ps", "ps_strategy", "buffers") if k in kwargs}


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
