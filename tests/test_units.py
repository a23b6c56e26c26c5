"""Human quantities: each bandwidth, duration and size unit pinned (issue 14 item 5, issue 16 items 6 and 15)."""
from __future__ import annotations

import pytest

from dlsched.errors import DlschedError
from dlsched.units import parse_bandwidth, parse_bytes, parse_duration, parse_fraction

MB = 1e6


@pytest.mark.parametrize("text,bytes_per_s", [
    # bits: lower-case b, "bit", or "bps"
    ("100Mb/s", 12.5 * MB), ("100mb/s", 12.5 * MB), ("100Mbps", 12.5 * MB), ("100mbps", 12.5 * MB),
    ("100mbit", 12.5 * MB), ("100Mbit", 12.5 * MB), ("100Mbit/s", 12.5 * MB), ("800bit", 100.0),
    ("8bps", 1.0), ("8kbit", 1e3), ("8Kbps", 1e3), ("1Gbps", 125 * MB), ("1gbit", 125 * MB),
    ("1 Gbit/s", 125 * MB), ("1Tbps", 125e9), ("8Mibit", 2**20),
    # bytes: upper-case B
    ("100MB/s", 100 * MB), ("100MBps", 100 * MB), ("1B/s", 1.0), ("1kB/s", 1e3), ("1KB/s", 1e3),
    ("1GB/s", 1e9), ("1TB/s", 1e12), ("1KiB/s", 1024.0), ("1MiB/s", 2.0**20), ("1GiB/s", 2.0**30),
])
def test_bandwidth_units(text, bytes_per_s):
    assert parse_bandwidth(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize("text,needle", [
    ("0B/s", "positive"), ("0Gbps", "positive"), ("1e400Gbps", "too large"), ("10", "unit"),
    ("10MB", "unit"), ("10 furlongs/s", "unit"), ("fast", "cannot parse"), ("-1Gbps", "cannot parse"),
])
def test_bandwidth_refusals(text, needle):
    with pytest.raises(DlschedError, match=needle):
        parse_bandwidth(text)


@pytest.mark.parametrize("text,seconds", [
    ("2", 2.0), ("2s", 2.0), ("2sec", 2.0), ("2ms", 2e-3), ("2us", 2e-6), ("2µs", 2e-6), ("2ns", 2e-9),
    ("1min", 60.0),
])
def test_duration_units(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["1e400", "1e400ms", "2 fortnights", "-1s"])
def test_duration_refusals(text):
    with pytest.raises(DlschedError):
        parse_duration(text)


@pytest.mark.parametrize("text,n", [
    ("512", 512), ("512B", 512), ("1kB", 1000), ("1KiB", 1024), ("1MB", 10**6), ("1MiB", 2**20),
    ("16GiB", 16 * 2**30), ("1GB", 10**9), ("1TiB", 2**40), ("1k", 1024), ("1G", 2**30),
])
def test_size_units(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["1e400GiB", "1e300GiB", "lots"])
def test_size_refusals(text):
    with pytest.raises(DlschedError):
        parse_bytes(text)


@pytest.mark.parametrize("text,value", [("2%", 0.02), ("0.1", 0.1), ("0", 0.0), ("250%", 2.5)])
def test_fractions(text, value):
    assert parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["-5%", "nan", "inf", "lots"])
def test_fraction_refusals(text):
    with pytest.raises(DlschedError, match="fraction"):
        parse_fraction(text)
