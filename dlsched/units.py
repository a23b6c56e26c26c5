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

_BANDWIDTH = {  # -> bytes per second
    "bps": 1 / 8, "kbps": 1e3 / 8, "mbps": 1e6 / 8, "gbps": 1e9 / 8, "tbps": 1e12 / 8,
    "bit/s": 1 / 8, "kbit/s": 1e3 / 8, "mbit/s": 1e6 / 8, "gbit/s": 1e9 / 8,
    "b/s": 1, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9,
    "kib/s": 1024, "mib/s": 1024**2, "gib/s": 1024**3,
}
_DURATION = {"s": 1, "sec": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60}
_BYTES = {
    "": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "k": 1024, "m": 1024**2, "g": 1024**3,
}


def _parse(text: str, table: dict, what: str, default_unit: str | None) -> float:
    m = re.fullmatch(_NUM + r"([A-Za-zµ/]*)\s*", str(text))
    if not m:
        raise DlschedError(f"cannot parse {what} {text!r}; expected a number with a unit, e.g. {_EXAMPLE[what]}")
    value, unit = float(m.group(1)), m.group(2)
    key = unit if unit in ("B/s", "MB/s", "GB/s", "KB/s", "kB/s") else unit.lower()
    if key in ("B/s", "KB/s", "kB/s", "MB/s", "GB/s"):
        key = key.lower()
    if not unit:
        if default_unit is None:
            raise DlschedError(f"{what} {text!r} needs a unit, e.g. {_EXAMPLE[what]}")
        key = default_unit
    if key not in table:
        raise DlschedError(f"unknown {what} unit {unit!r} in {text!r}; known: {', '.join(sorted(k for k in table if k))}")
    return value * table[key]


_EXAMPLE = {"bandwidth": "10Gbps or 500MiB/s", "duration": "50us or 2ms", "memory size": "16GiB"}


def parse_bandwidth(text: str) -> float:
    """Bandwidth in bytes/second. Bits: ``bps``, ``Kbps``, ``Mbps``, ``Gbps``; bytes: ``B/s``, ``MB/s``, ``MiB/s``…"""
    # B/s (bytes) and b/s are told apart by case only for the plain unit.
    m = re.fullmatch(_NUM + r"([A-Za-z/]+)\s*", str(text))
    if m and m.group(2) in ("B/s", "KB/s", "kB/s", "MB/s", "GB/s"):
        return float(m.group(1)) * {"B/s": 1, "KB/s": 1e3, "kB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9}[m.group(2)]
    value = _parse(text, _BANDWIDTH, "bandwidth", None)
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
    return int(_parse(text, _BYTES, "memory size", ""))


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
