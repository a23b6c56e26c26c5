"""Device specifications for the analytic (roofline) oracle.

Built-in specs use public FP32 peak figures (no tensor cores, since the
default training dtype is float32):

======  =================  ================  ===============  ==============
name    peak FP32          memory bandwidth  launch overhead  network
======  =================  ================  ===============  ==============
cpu     1.0 TFLOP/s        50 GB/s           5 us             10 Gbit/s
a100    19.5 TFLOP/s       1,555 GB/s        5 us             100 Gbit/s
h100    67 TFLOP/s         3,350 GB/s        4 us             400 Gbit/s
======  =================  ================  ===============  ==============

``cpu`` is a generic server CPU (16 cores with AVX2 FMA at ~3 GHz), not this
machine. ``a100`` is the A100 40 GB SXM, ``h100`` the H100 SXM. A user spec is
a YAML file with the same keys::

    name: my-gpu
    peak_flops: 30e12          # FLOP/s
    memory_bandwidth: 900GB/s  # or a number of bytes/s
    launch_overhead: 5us
    network_bandwidth: 25Gbps
    network_latency: 20us
    memory: 24GiB              # optional: device memory, used by batch plans
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from dlsched.errors import DlschedError
from dlsched.units import parse_bandwidth, parse_bytes, parse_duration


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    peak_flops: float          # FLOP/s
    memory_bandwidth: float    # bytes/s
    launch_overhead: float     # s per op
    network_bandwidth: float   # bytes/s
    network_latency: float     # s per transfer
    memory: int | None = None  # bytes

    def to_dict(self) -> dict:
        return asdict(self)


BUILTIN = {
    "cpu": DeviceSpec("cpu", 1.0e12, 50e9, 5e-6, 10e9 / 8, 50e-6, 64 * 1024**3),
    "a100": DeviceSpec("a100", 19.5e12, 1555e9, 5e-6, 100e9 / 8, 10e-6, 40 * 1024**3),
    "h100": DeviceSpec("h100", 67e12, 3350e9, 4e-6, 400e9 / 8, 10e-6, 80 * 1024**3),
}


def load_device_spec(name_or_path: str) -> DeviceSpec:
    """A built-in spec by name (``cpu``, ``a100``, ``h100``) or a YAML file.

    Raises
    ------
    DlschedError
        Unknown name, unreadable YAML, or missing/invalid fields.
    """
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]
    path = Path(name_or_path)
    if not path.exists():
        raise DlschedError(f"unknown device spec {name_or_path!r}: not a built-in ({', '.join(BUILTIN)}) "
                           "and no such YAML file")
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise DlschedError(f"{path}: the device spec is not valid YAML ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DlschedError(f"{path}: cannot read the device spec ({getattr(e, 'strerror', None) or e})") from None
    if not isinstance(doc, dict):
        raise DlschedError(f"{path}: a device spec must be a YAML mapping of name, peak_flops, memory_bandwidth, …")
    try:
        spec = DeviceSpec(
            name=str(doc.get("name", path.stem)),
            peak_flops=float(doc["peak_flops"]),
            memory_bandwidth=_rate(doc["memory_bandwidth"]),
            launch_overhead=parse_duration(str(doc.get("launch_overhead", "5us"))),
            network_bandwidth=_rate(doc.get("network_bandwidth", "10Gbps")),
            network_latency=parse_duration(str(doc.get("network_latency", "50us"))),
            memory=parse_bytes(str(doc["memory"])) if doc.get("memory") is not None else None,
        )
    except KeyError as e:
        raise DlschedError(f"{path}: the device spec lacks the field {e.args[0]!r}") from None
    except (TypeError, ValueError, DlschedError) as e:
        raise DlschedError(f"{path}: invalid device spec value ({e})") from None
    for key in ("peak_flops", "memory_bandwidth", "network_bandwidth"):
        value = getattr(spec, key)
        if not (math.isfinite(value) and value > 0):
            raise DlschedError(f"{path}: {key} must be a finite positive rate, got {value!r}")
    return spec


def _rate(value) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return parse_bandwidth(str(value))
