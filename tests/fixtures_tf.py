"""Session fixtures for the TensorFlow tests: Keras and TF1 models, built once and cached.

Models are built by ``examples/build_keras.py`` in a subprocess (Keras and the
TF1 graph mode stay out of the test process) into ``tests.conftest.CACHE``;
files are written atomically, so concurrent test runs share them safely.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import CACHE, REPO

BUILD = REPO / "examples" / "build_keras.py"


def _build_keras(name: str) -> dict:
    paths = {"graphdef": CACHE / f"{name}.pb", "savedmodel": CACHE / f"{name}_savedmodel",
             "counts": CACHE / f"{name}_keras.json"}
    if not (paths["graphdef"].exists() and (paths["savedmodel"] / "saved_model.pb").exists()
            and paths["counts"].exists()):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        subprocess.run([sys.executable, str(BUILD), str(CACHE), "--models", name], check=True, env=env,
                       capture_output=True, text=True, timeout=900)
    paths["keras"] = json.loads(paths["counts"].read_text())
    return paths


@pytest.fixture(scope="session")
def keras_resnet50() -> dict:
    """``graphdef``/``savedmodel`` paths of Keras ResNet50 and ``keras``: its own counts."""
    return _build_keras("resnet50")


@pytest.fixture(scope="session")
def keras_vgg16() -> dict:
    return _build_keras("vgg16")


@pytest.fixture(scope="session")
def tf1_graphs() -> dict:
    """The TF1 ``VariableV2`` MLP as ``graphdef`` (.pb), ``pbtxt`` and ``frozen`` (.pb)."""
    from examples.build_keras import TF1_VARIABLES, build_tf1

    paths = build_tf1(CACHE)
    paths["variables"] = TF1_VARIABLES
    return paths
