"""The one ``--device`` check (dlsched.devices) that the profilers and the memory measurement share."""
from __future__ import annotations

import pytest

from dlsched import devices
from dlsched.errors import DlschedError


def test_one_device_check_for_every_framework(monkeypatch):
    assert devices.check_device("cpu", "torch") == "cpu"
    with pytest.raises(DlschedError, match="unknown device 'tpu'; expected cpu or cuda"):
        devices.check_device("tpu", "tensorflow")
    monkeypatch.setitem(devices._GPU_PROBES, "torch", lambda: ("PyTorch", "torch x, built with CUDA none"))
    with pytest.raises(DlschedError, match=r"PyTorch sees no GPU, so no CUDA device is available \(torch x"):
        devices.check_device("cuda", "torch")
    monkeypatch.setitem(devices._GPU_PROBES, "torch", lambda: None)
    assert devices.check_device("cuda", "torch") == "cuda"
    assert devices.check_device("cuda") == "cuda"  # no framework: the name only


def test_profilers_and_memory_measurement_share_the_device_check():
    import inspect

    from dlsched.planning import measure
    from dlsched.profiling import onnx_profiler, tf_profiler, torch_profiler

    for mod in (torch_profiler, tf_profiler, onnx_profiler, measure):
        src = inspect.getsource(mod)
        assert "check_device(device," in src and "expected cpu or cuda" not in src, mod.__name__
