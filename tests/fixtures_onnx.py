"""Session fixtures for the ONNX tests: exported example models, cached on disk.

Models are exported once into ``CACHE/onnx-v1/`` by ``examples/export_onnx.py``
(written under a temporary name and renamed, so concurrent test runs never
read half a file) and reused by later sessions.
"""
from __future__ import annotations

import sys

import pytest

from tests.conftest import CACHE, REPO

ONNX_CACHE = CACHE / "onnx-v1"


def exported(name: str):
    """Path of the example model ``name`` as ONNX, exporting it on first use."""
    path = ONNX_CACHE / f"{name}.onnx"
    if not path.exists():
        sys.path.insert(0, str(REPO))
        from examples.export_onnx import export

        export(name, ONNX_CACHE)
    return path


@pytest.fixture(scope="session")
def onnx_resnet50():
    return exported("resnet50")


@pytest.fixture(scope="session")
def onnx_vgg16():
    return exported("vgg16")


@pytest.fixture(scope="session")
def onnx_transformer():
    return exported("transformer")


@pytest.fixture(scope="session")
def onnx_small_cnn():
    return exported("small_cnn")
