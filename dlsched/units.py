"""Parsing of human quantities: bandwidth, durations, memory sizes, percentages.

>>> parse_bandwidth("10Gbps")
1250000000.0
>>> parse_duration("2ms")
0.002
>>> parse_bytes("16GiB")
17179869184
"""
from __future__ import annotations

import math
import re

from .errors import DlschedError

_NUM = r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"

_DURATION = {"s": 1, "sec": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60}
_BYTES = {
    "": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "k": 1024, "m": 1024**2, "g": 1024**3,
}


def _number_and_unit(text: str, what: str) -> tuple[float, str]:
    m = re.fullmatch(_NUM + r"([A-Za-zµ/]*)\s*", str(text))
    if not m:
        raise DlschedError(f"cannot parse {what} {text!r}; expected a number with a unit, e.g. {_EXAMPLE[what]}")
    value = float(m.group(1))
    if not math.isfinite(value):  # 1e400 reads as inf
        raise DlschedError(f"{what} {text!r} is too large to mean anything")
    return value, m.group(2)


def _parse(text: str, table: dict, what: str, default_unit: str | None) -> float:
    value, unit = _number_and_unit(text, what)
    key = unit.lower()
    if not unit:
        if default_unit is None:
            raise DlschedError(f"{what} {text!r} needs a unit, e.g. {_EXAMPLE[what]}")
        key = default_unit
    if key not in table:
        raise DlschedError(f"unknown {what} unit {unit!r} in {text!r}; known: {', '.join(sorted(k for k in table if k))}")
    return value * table[key]


_EXAMPLE = {"bandwidth": "10Gbps, 100mbit or 500MiB/s", "duration": "50us or 2ms", "memory size": "16GiB"}
# A bandwidth unit: an SI or binary prefix, then bits or bytes, then "/s" or "ps" ("bit" may stand alone, as in tc).
_RATE_UNIT = re.compile(r"(?P<prefix>[kKmMgGtT]?)(?P<binary>i?)(?:(?P<bits>bit|b)|(?P<bytes>B))(?P<per>/s|ps)?")
_PREFIX = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_bandwidth(text: str) -> float:
    """Bandwidth in bytes/second; bits and bytes are told apart by case, as SI and ``tc`` do.

    ``b`` and ``bit`` are bits, ``B`` is bytes: ``100Mb/s``, ``100Mbps``, ``100mbit`` and
    ``100Mbit/s`` are 12.5e6 B/s; ``100MB/s`` is 100e6 B/s and ``100MiB/s`` 100·2²⁰ B/s.
    The prefix's case does not matter (``kbit`` = ``Kbit``).

    >>> parse_bandwidth("100Mb/s"), parse_bandwidth("100MB/s"), parse_bandwidth("100mbit")
    (12500000.0, 100000000.0, 12500000.0)
    >>> parse_bandwidth("1GiB/s") == 2**30
    True
    """
    value, unit = _number_and_unit(text, "bandwidth")
    m = _RATE_UNIT.fullmatch(unit)
    if not m or (m["bits"] != "bit" and not m["per"]):
        raise DlschedError(f"unknown bandwidth unit {unit!r} in {text!r}; use bits (bps, Kbps, Mbps, Gbps, "
                           "mbit, Mb/s) or bytes (B/s, KB/s, MB/s, GB/s, MiB/s, GiB/s)")
    scale = (1024 if m["binary"] else 1000) ** _PREFIX[m["prefix"].lower()]
    value *= scale / 8 if m["bits"] else scale
    if value <= 0:
        raise DlschedError(f"bandwidth must be positive, got {text!r}")
    return value


def parse_duration(text: str) -> float:
    """Duration in seconds (``s``, ``ms``, ``us``, ``ns``; a bare number is seconds)."""
    value = _parse(text, _DURATION, "duration", "s")
    if value < 0:
        raise DlschedError(f"duration must not be negative, got {text!r}")
    return value


def parse_bytes(text: str) -> int:
    """Memory size in bytes (``16GiB``, ``512MB``; a bare number is bytes)."""
    value = _parse(text, _BYTES, "memory size", "")
    if value > 2**63:
        raise DlschedError(f"memory size {text!r} is too large to mean anything")
    return int(value)


def parse_fraction(text: str) -> float:
    """``2%`` → 0.02, ``0.1`` → 0.1; negative, infinite and NaN values mean nothing here and are refused.

    >>> parse_fraction("2%"), parse_fraction("0.1")
    (0.02, 0.1)
    """
    s = str(text).strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise DlschedError(f"cannot parse {text!r} as a fraction (e.g. 0.1 or 10%)") from None
    if not math.isfinite(value) or value < 0:
        raise DlschedError(f"a fraction must be a finite, non-negative number (e.g. 0.1 or 10%), got {text!r}")
    return value


_PARSERS = {"bytes": parse_bytes, "bandwidth": parse_bandwidth, "duration": parse_duration, "fraction": parse_fraction}


def parse_quantity(kind: str, text, what: str | None = None, positive: bool = True):
    """Parse a number with a unit and check it means something.

    Parameters
    ----------
    kind : {"bytes", "bandwidth", "duration", "fraction"}
        Parsed by :func:`parse_bytes`, :func:`parse_bandwidth`, :func:`parse_duration`
        or :func:`parse_fraction` (``16GiB``, ``10Gbps``, ``50us``, ``10%``).
    text : str or number
    what : str, optional
        The option or field the message starts with (``"--memory"``, ``"worker gpu0: memory"``).
    positive : bool
        Refuse zero as well as negative values (a fraction is then in ``[0, 1)`` instead).

    Returns
    -------
    int or float
        Bytes (int), bytes per second, seconds, or a fraction.

    Raises
    ------
    DlschedError
        The text does not parse, or the value means nothing (zero memory, a margin of 100%).

    Examples
    --------
    >>> parse_quantity("bytes", "1KiB"), parse_quantity("fraction", "10%")
    (1024, 0.1)
    >>> parse_quantity("bytes", "0", "worker a: memory")
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: worker a: memory: must be positive, got '0'
    """
    where = f"{what}: " if what else ""
    try:
        value = _PARSERS[kind](str(text))
    except DlschedError as e:
        raise DlschedError(f"{where}{e}") from None
    if kind == "fraction":
        if not 0 <= value < 1:  # a margin of 100% leaves nothing to use
            raise DlschedError(f"{where}a fraction in [0, 1) is needed (e.g. 0.1 or 10%), got {text!r}")
    elif positive and not value > 0:
        raise DlschedError(f"{where}must be positive, got {text!r}")
    return value


def parse_list(text: str | None, convert, option: str, expected: str) -> list | None:
    """A comma-separated list of numbers (``--caps 96,64``, ``--cpu-quota 0.5,0.25``); ``None`` stays ``None``.

    >>> parse_list("96,64", int, "--caps", "whole numbers, e.g. 96,64")
    [96, 64]
    >>> parse_list("1,x", float, "--cpu-quota", "shares of a core, e.g. 0.5,0.25")
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: --cpu-quota '1,x': expected comma-separated shares of a core, e.g. 0.5,0.25
    """
    if text is None:
        return None
    try:
        return [convert(x) for x in text.split(",")]
    except ValueError:
        raise DlschedError(f"{option} {text!r}: expected comma-separated {expected}") from None
