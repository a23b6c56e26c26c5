"""FSDP plan files: which modules become ``fully_shard`` units and how they prefetch (issue 30, docs/plan-fsdp.md).

Written by ``dlsched plan-fsdp MODEL ... --write-plan FILE``, applied in a
user's script by :func:`dlsched.hooks.fsdp.apply_plan`. JSON (versioned)::

    {"format": "dlsched-fsdp-plan", "version": 1,
     "model": {"name": str, "parameters": str},
     "workers": int,
     "units": [{"module": "layers.0", "reshard_after_forward": true}, ...],
     "forward_prefetch": {"layers.0": ["layers.1"], ...},
     "backward_prefetch": {"layers.1": ["layers.0"], ...},
     "unshard_async": bool,
     "predicted": {...}}

``units`` are module paths as ``model.named_modules()`` spells them, in
forward order; the root (the model itself, ``""``) is always a unit and is
not listed. ``model.parameters`` is :func:`parameter_fingerprint` of the
model's trained parameters (names and shapes): the same figure from a DAG's
recv ops and from an ``nn.Module``, so a plan made for another model is
refused before anything is sharded. ``predicted`` is free-form (the
planner's figures) and not checked.

Examples
--------
>>> import tempfile, os
>>> plan = FsdpPlan("m", parameter_fingerprint([("a.w", [4, 2])]), 2, [("a", False)], {}, {}, True)
>>> path = os.path.join(tempfile.mkdtemp(), "p.json")
>>> write_fsdp_plan(plan, path)
>>> read_fsdp_plan(path) == plan
True
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from dlsched.atomic import atomic_write_text
from dlsched.errors import DlschedError

FORMAT = "dlsched-fsdp-plan"
VERSION = 1
_LARGEST_FILE = 64 * 2**20


class FsdpPlanError(DlschedError):
    """An FSDP plan file is unreadable, not a plan, or does not fit the model it is applied to."""


def parameter_fingerprint(params: Iterable[tuple[str, Iterable[int]]]) -> str:
    """A short hash of the trained parameters' names and shapes, in any order.

    >>> parameter_fingerprint([("b", [2]), ("a", [3, 1])]) == parameter_fingerprint([("a", (3, 1)), ("b", (2,))])
    True
    """
    rows = sorted([str(n), [int(d) for d in shape]] for n, shape in params)
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass
class FsdpPlan:
    """A plan: the model it was made for, the processes, the units ``(module, reshard_after_forward)`` in
    forward order, the prefetch lists, whether all-gathers are async, and the planner's figures."""

    model_name: str
    fingerprint: str
    workers: int
    units: list[tuple[str, bool]]
    forward_prefetch: dict[str, list[str]]
    backward_prefetch: dict[str, list[str]]
    unshard_async: bool
    predicted: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION,
                "model": {"name": self.model_name, "parameters": self.fingerprint}, "workers": self.workers,
                "units": [{"module": m, "reshard_after_forward": r} for m, r in self.units],
                "forward_prefetch": self.forward_prefetch, "backward_prefetch": self.backward_prefetch,
                "unshard_async": self.unshard_async, "predicted": self.predicted}


def write_fsdp_plan(plan: FsdpPlan, path: str | Path) -> None:
    """Write ``plan`` as JSON, atomically (no partial file on failure)."""
    atomic_write_text(path, json.dumps(plan.to_dict(), indent=1) + "\n")


def read_fsdp_plan(path: str | Path) -> FsdpPlan:
    """Read and check the plan at ``path``.

    Raises
    ------
    FsdpPlanError
        Missing, unreadable, too large, not JSON, or not a plan of this format (every problem named).
    """
    where = str(path)
    try:
        p = Path(path)
        if p.stat().st_size > _LARGEST_FILE:
            raise FsdpPlanError(f"{where}: {p.stat().st_size:,} bytes is not an FSDP plan (they are a few KB)")
        text = p.read_text(encoding="utf-8")
    except FsdpPlanError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise FsdpPlanError(f"{where}: cannot read the FSDP plan ({getattr(e, 'strerror', None) or e})") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise FsdpPlanError(f"{where}: not JSON ({str(e)[:200]}); give the file `dlsched plan-fsdp MODEL ... "
                            "--write-plan FILE` wrote") from None
    return parse_fsdp_plan(data, where)


def parse_fsdp_plan(data, where: str = "the FSDP plan") -> FsdpPlan:
    """Check the form of a plan's JSON object (:func:`read_fsdp_plan`)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FsdpPlanError(f"{where}: not an FSDP plan (no \"format\": \"{FORMAT}\"); give the file "
                            "`dlsched plan-fsdp MODEL ... --write-plan FILE` wrote")
    if data.get("version") != VERSION:
        raise FsdpPlanError(f"{where}: version {data.get('version')!r} of the FSDP plan format; this dlsched reads "
                            f"version {VERSION}")
    problems = []
    model = data.get("model")
    if not (isinstance(model, dict) and isinstance(model.get("name"), str)
            and isinstance(model.get("parameters"), str)):
        problems.append("'model' must be an object with a 'name' and a 'parameters' fingerprint")
        model = {"name": "", "parameters": ""}
    workers = data.get("workers")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 2:
        problems.append(f"'workers' must be a whole number of processes ≥ 2, got {workers!r}")
    units = data.get("units")
    parsed: list[tuple[str, bool]] = []
    if not isinstance(units, list):
        problems.append("'units' must be a list of {\"module\": ..., \"reshard_after_forward\": ...}")
        units = []
    for i, u in enumerate(units):
        if not (isinstance(u, dict) and isinstance(u.get("module"), str) and u["module"]
                and isinstance(u.get("reshard_after_forward"), bool)):
            problems.append(f"units[{i}] must be {{\"module\": a non-empty module path, "
                            f"\"reshard_after_forward\": true or false}}, got {json.dumps(u)[:80]}")
            continue
        parsed.append((u["module"], u["reshard_after_forward"]))
    lists = {}
    for key in ("forward_prefetch", "backward_prefetch"):
        value = data.get(key, {})
        if not (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, list)
                                                and all(isinstance(t, str) for t in v) for k, v in value.items())):
            problems.append(f"'{key}' must map a unit's module path to a list of module paths")
            value = {}
        lists[key] = {k: list(v) for k, v in value.items()}
    if not isinstance(data.get("unshard_async", False), bool):
        problems.append(f"'unshard_async' must be true or false, got {data.get('unshard_async')!r}")
    if problems:
        raise FsdpPlanError(f"{where}: " + "; ".join(problems[:6]))
    return FsdpPlan(model["name"], model["parameters"], workers, parsed, lists["forward_prefetch"],
                    lists["backward_prefetch"], data.get("unshard_async", False), data.get("predicted") or {})
