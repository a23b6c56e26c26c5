"""Load-imbalance presets for the all-reduce simulator: parse ``--imbalance`` and draw it (DESIGN §4.8).

An imbalance gives every process ``p`` at every step ``j`` a speed factor
``f[j, p]`` (its compute takes ``f`` times the nominal step) and a delay
``d[j, p]`` in seconds added before its collective, as eager-SGD injects load
imbalance by sleeping in the training step (§7). Specs:

``none``
    every process at nominal speed, no delay.
``random:k=K:delay=D``
    at every step, ``K`` distinct processes drawn at random (seeded) sleep ``D``
    (§7.2.1: one of 8 processes, 200–400 ms).
``skew:linear:A:B``
    process ``p`` sleeps ``A + p·(B−A)/(P−1)`` at every step (§7.1, Fig. 9).
``rotate:A:B``
    the same linear spread, shifted by one process after each step: process
    ``p`` sleeps the ``(p + j) mod P``-th value at step ``j`` (§7.2.3).
``speed:F0,F1,…``
    fixed per-process speed factors, one per process (``2`` is twice as slow).
``lognormal:mean=M:sd=S:min=A:max=B``
    every process sleeps a lognormal draw of mean ``M`` and standard deviation
    ``S`` at every step, clipped to ``[A, B]`` (a runtime distribution with one
    mode and a tail, eager-SGD Figs. 2–4).
``trace:FILE.csv``
    measured per-step delays in seconds: one row per step, one column per
    process (a header row of names is allowed); repeated when the run has more
    steps than the trace has rows.

Examples
--------
>>> imb = parse_imbalance("skew:linear:1ms:4ms")
>>> f, d = imb.draw(4, 2, seed=0)
>>> d[0].tolist(), f[0].tolist()
([0.001, 0.002, 0.003, 0.004], [1.0, 1.0, 1.0, 1.0])
>>> parse_imbalance("rotate:1ms:4ms").draw(4, 2)[1][1].tolist()
[0.002, 0.003, 0.004, 0.001]
>>> (parse_imbalance("random:k=1:delay=200ms").draw(8, 100, seed=3)[1] > 0).sum(axis=1).tolist() == [1] * 100
True
>>> parse_imbalance("speed:1,2").draw(3, 1)
Traceback (most recent call last):
...
dlsched.errors.DlschedError: --imbalance speed:1,2 gives 2 speed factors, but the run has 3 processes; give one factor per process
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlsched.errors import DlschedError
from dlsched.units import parse_duration

KINDS = ("none", "random", "skew", "rotate", "speed", "lognormal", "trace")

# A step's injected delay beyond an hour, or a process over a thousand times slower or faster than nominal,
# describes no training run; far beyond them the draws overflow (a lognormal of sd/mean = 1e300).
MAX_DELAY = 3600.0
SPEED_RANGE = (1e-3, 1e3)
MAX_CV = 1e3  # a lognormal's sd / mean

_HELP = ("known forms: none, random:k=1:delay=200ms, skew:linear:1ms:32ms, rotate:50ms:400ms, speed:1,1,2,1, "
         "lognormal:mean=50ms:sd=20ms:min=0ms:max=400ms, trace:FILE.csv")


@dataclass(frozen=True)
class Imbalance:
    """A parsed ``--imbalance`` spec; :meth:`draw` turns it into per-step factors and delays."""

    spec: str
    kind: str
    params: dict = field(default_factory=dict)

    def draw(self, processes: int, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(factors, delays)``, both ``steps × processes``; the same seed gives the same draw.

        Raises
        ------
        DlschedError
            The spec does not fit the run (``k`` above the process count, a
            speed list or a trace for another number of processes).
        """
        P, T = processes, steps
        factors, delays = np.ones((T, P)), np.zeros((T, P))
        p, kind = self.params, self.kind
        if kind == "random":
            if p["k"] > P:
                raise self._error(f"asks for k={p['k']} delayed processes, but the run has {P}")
            rng = np.random.default_rng([seed, 1])  # independent of majority's initiator draw
            for j in range(T):
                delays[j, rng.choice(P, size=p["k"], replace=False)] = p["delay"]
        elif kind in ("skew", "rotate"):
            spread = np.linspace(p["low"], p["high"], P) if P > 1 else np.array([p["low"]])
            rows = np.arange(T)[:, None] if kind == "rotate" else 0
            delays[:] = spread[(np.arange(P)[None, :] + rows) % P]
        elif kind == "speed":
            if len(p["factors"]) != P:
                raise self._error(f"gives {len(p['factors'])} speed factors, but the run has {P} processes; "
                                  "give one factor per process")
            factors[:] = p["factors"]
        elif kind == "lognormal":
            mean, sd = p["mean"], p["sd"]
            sigma2 = math.log1p((sd / mean) ** 2)
            draws = np.random.default_rng([seed, 1]).lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), (T, P))
            delays[:] = np.clip(draws, p["min"], p["max"])
        elif kind == "trace":
            table = p["table"]
            if table.shape[1] != P:
                raise self._error(f"is a trace of {table.shape[1]} processes (columns), but the run has {P}; "
                                  "record the trace with the same number of processes or change --workers")
            delays[:] = table[np.arange(T) % len(table)]
        return factors, delays

    def _error(self, problem: str) -> DlschedError:
        return DlschedError(f"--imbalance {self.spec} {problem}")


def parse_imbalance(spec: str | None) -> Imbalance:
    """Parse an ``--imbalance`` spec (see the module docstring); ``None`` or ``""`` is ``none``.

    Raises
    ------
    DlschedError
        An unknown form, a malformed or negative number, an unreadable trace.
    """
    spec = (spec or "none").strip()
    kind, _, rest = spec.partition(":")
    try:
        params = _PARSERS[kind](rest, spec) if kind in _PARSERS else None
    except DlschedError as e:
        raise DlschedError(f"--imbalance {spec!r}: {e}; {_HELP}") from None
    if params is None:
        raise DlschedError(f"--imbalance {spec!r} is not a known imbalance; {_HELP}")
    return Imbalance(spec, kind, params)


def _keyed(rest: str, keys: tuple[str, ...]) -> dict[str, str]:
    pairs = [part.partition("=") for part in rest.split(":") if part]
    got = {k.strip(): v.strip() for k, eq, v in pairs if eq}
    if len(got) != len(pairs) or set(got) != set(keys):
        raise DlschedError(f"expected exactly the fields {', '.join(k + '=…' for k in keys)}")
    return got


def _none(rest: str, spec: str) -> dict | None:
    return {} if not rest else None


def _random(rest: str, spec: str) -> dict:
    got = _keyed(rest, ("k", "delay"))
    if not got["k"].isdigit() or int(got["k"]) < 1:
        raise DlschedError(f"k must be a whole number ≥ 1, got {got['k']!r}")
    return {"k": int(got["k"]), "delay": _delay("delay", got["delay"])}


def _delay(name: str, text: str) -> float:
    """A delay field: a duration in ``[0, MAX_DELAY]``."""
    value = parse_duration(text)
    if not 0 <= value <= MAX_DELAY:
        raise DlschedError(f"{name} must lie between 0 and {MAX_DELAY:.0f} s, got {text!r}")
    return value


def _spread(parts: list[str]) -> dict:
    if len(parts) != 2:
        raise DlschedError("expected two durations, the fastest and the slowest process's delay")
    low, high = (_delay("a delay", x) for x in parts)
    if high < low:
        raise DlschedError(f"the first delay ({parts[0]}) must not exceed the second ({parts[1]})")
    return {"low": low, "high": high}


def _skew(rest: str, spec: str) -> dict:
    shape, _, tail = rest.partition(":")
    if shape != "linear":
        raise DlschedError(f"only a linear skew is known (skew:linear:A:B), got {shape!r}")
    return _spread(tail.split(":"))


def _rotate(rest: str, spec: str) -> dict:
    return _spread(rest.split(":"))


def _speed(rest: str, spec: str) -> dict:
    try:
        factors = [float(x) for x in rest.split(",")]
    except ValueError:
        raise DlschedError(f"speed factors must be numbers separated by commas, got {rest!r}") from None
    low, high = SPEED_RANGE
    if not all(math.isfinite(f) and low <= f <= high for f in factors):
        raise DlschedError(f"speed factors must lie between {low:g} and {high:g}, got {rest!r}")
    return {"factors": factors}


def _lognormal(rest: str, spec: str) -> dict:
    got = {k: _delay(k, v) for k, v in _keyed(rest, ("mean", "sd", "min", "max")).items()}
    if got["mean"] <= 0 or got["max"] < got["min"]:
        raise DlschedError("the mean must be positive and min must not exceed max")
    if got["sd"] > MAX_CV * got["mean"]:
        raise DlschedError(f"sd must be at most {MAX_CV:g} times the mean (a spread beyond that puts every draw "
                           f"at min or max), got mean={got['mean']:g} s, sd={got['sd']:g} s")
    return got


def _trace(rest: str, spec: str) -> dict:
    path = Path(rest)
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise DlschedError(f"cannot read the trace file {rest!r} ({type(e).__name__}: {e})") from None
    rows = [[c.strip() for c in ln.split(",")] for ln in lines]
    if rows and not _numeric(rows[0]):
        rows = rows[1:]  # a header of process names
    if not rows or len({len(r) for r in rows}) != 1 or not all(_numeric(r) for r in rows):
        raise DlschedError(f"{rest}: a trace needs one row per step and the same number of columns (one per "
                           "process) in every row, each a delay in seconds")
    table = np.array(rows, dtype=float)
    if not np.all(np.isfinite(table)) or (table < 0).any() or (table > MAX_DELAY).any():
        raise DlschedError(f"{rest}: every delay must be a number of seconds between 0 and {MAX_DELAY:.0f}")
    return {"table": table, "path": rest}


def _numeric(row: list[str]) -> bool:
    try:
        [float(c) for c in row]
    except ValueError:
        return False
    return True


_PARSERS = {"none": _none, "random": _random, "skew": _skew, "rotate": _rotate, "speed": _speed,
            "lognormal": _lognormal, "trace": _trace}
