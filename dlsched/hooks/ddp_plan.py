"""The DDP plan in a user's own script: the keywords ``dlsched plan-ddp --json`` recommends, read and checked.

``plan-ddp`` (issue 29, item 2) writes ``"ddp_kwargs": {"bucket_cap_mb": <float>,
"gradient_as_bucket_view": true}`` into its JSON report. A user's DDP script,
launched by ``torchrun``, passes them on::

    model = DistributedDataParallel(model, **ddp_kwargs("plan.json"))

:func:`ddp_kwargs` refuses a file that is not such a report, and a value DDP
would take wrongly (a negative cap, a string for a flag), with one
:class:`DDPPlanError` message naming the file and the key: a typo in the plan
must not silently train with DDP's defaults. ``bucket_cap_mb: null`` is DDP's
own default (25 MB), and stays ``None``.

Examples
--------
>>> import json, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "plan.json")
>>> _ = open(path, "w").write(json.dumps({"ddp_kwargs": {"bucket_cap_mb": 4.0, "gradient_as_bucket_view": True}}))
>>> ddp_kwargs(path)
{'bucket_cap_mb': 4.0, 'gradient_as_bucket_view': True}
>>> _ = open(path, "w").write(json.dumps({"ddp_kwargs": {"bucket_cap_mb": -1}}))
>>> ddp_kwargs(path)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dlsched.hooks.ddp_plan.DDPPlanError: ...: ddp_kwargs.bucket_cap_mb must be a finite number of MB above 0 (or null for DDP's default), got -1

Public API: :func:`ddp_kwargs`, :func:`check_ddp_kwargs`, :class:`DDPPlanError`, :data:`FLAGS`.
"""
from __future__ import annotations

import json
import math
import numbers
from pathlib import Path

from dlsched.errors import DlschedError

__all__ = ["FLAGS", "DDPPlanError", "check_ddp_kwargs", "ddp_kwargs"]

#: DistributedDataParallel's true/false keywords that a plan may set
FLAGS = ("gradient_as_bucket_view", "static_graph", "find_unused_parameters", "broadcast_buffers")
_LARGEST_FILE = 64 * 2**20  # a plan report is a few KB


class DDPPlanError(DlschedError):
    """A DDP plan file is unreadable, not a ``plan-ddp`` report, or holds a value DDP would take wrongly."""


def _cap(value) -> bool:
    return value is None or (not isinstance(value, bool) and isinstance(value, numbers.Real)
                             and math.isfinite(value) and value > 0)


def check_ddp_kwargs(kwargs, where: str = "the plan") -> dict:
    """Check ``kwargs`` (the report's ``ddp_kwargs``) and return a copy to pass to DDP.

    Raises
    ------
    DDPPlanError
        Not an object, an unknown key, or a value of the wrong type or range; every problem is named.
    """
    if not isinstance(kwargs, dict):
        raise DDPPlanError(f"{where}: ddp_kwargs must be an object of DistributedDataParallel keywords, "
                           f"got {type(kwargs).__name__}")
    problems = []
    for key, value in kwargs.items():
        if key == "bucket_cap_mb":
            if not _cap(value):
                problems.append(f"ddp_kwargs.bucket_cap_mb must be a finite number of MB above 0 (or null for "
                                f"DDP's default), got {value!r}")
        elif key == "bucket_cap_mb_list":
            if not isinstance(value, list) or not value or not all(v is not None and _cap(v) for v in value):
                problems.append(f"ddp_kwargs.bucket_cap_mb_list must be a list of numbers of MB above 0, got "
                                f"{value!r}")
        elif key in FLAGS:
            if not isinstance(value, bool):
                problems.append(f"ddp_kwargs.{key} must be true or false, got {value!r}")
        else:
            problems.append(f"ddp_kwargs.{key} is not a keyword dlsched plans (known: bucket_cap_mb, "
                            f"bucket_cap_mb_list, {', '.join(FLAGS)})")
    if problems:
        raise DDPPlanError(f"{where}: " + "; ".join(problems))
    return dict(kwargs)


def ddp_kwargs(path) -> dict:
    """The ``ddp_kwargs`` of the ``plan-ddp --json`` report at ``path``, checked (:func:`check_ddp_kwargs`).

    Raises
    ------
    DDPPlanError
        The file is missing, unreadable, too large, not JSON, has no ``ddp_kwargs``, or a bad value.
    """
    where = str(path)
    try:
        p = Path(path)
        if p.stat().st_size > _LARGEST_FILE:
            raise DDPPlanError(f"{where}: {p.stat().st_size:,} bytes is not a plan-ddp report (they are a few KB)")
        text = p.read_text(encoding="utf-8")
    except DDPPlanError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DDPPlanError(f"{where}: cannot read the DDP plan ({getattr(e, 'strerror', None) or e})") from None
    try:
        report = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise DDPPlanError(f"{where}: not JSON ({str(e)[:200]}); give the output of "
                           "`dlsched plan-ddp MODEL ... --json`") from None
    if not isinstance(report, dict) or "ddp_kwargs" not in report:
        raise DDPPlanError(f"{where}: no \"ddp_kwargs\" in it; give the output of `dlsched plan-ddp MODEL ... --json`")
    return check_ddp_kwargs(report["ddp_kwargs"], where)
