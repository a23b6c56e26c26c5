"""Session fixtures for the TensorFlow tests: Keras and TF1 models, built once and cached.

Models are built by ``examples/build_keras.py`` in a subprocess (Keras and the
TF1 graph mode stay out of the test process) into ``tests.conftest.CACHE``;
files are written atomically, so concurrent test runs share them safely.

It also holds the ``tf_onednn`` marker. TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS``
once, at import, and the setting decides which kernels get fused, so the TF
profiler and timeline tests must pass with it on and off, each in a process of
its own. ``tests/test_tf_onednn.py`` runs the marked tests in two pytest
subprocesses (``=0`` and ``=1``); when it is collected in the same session,
the marked tests are skipped in the main process, so they run twice, not three
times. Run alone (``pytest tests/test_tf_profiler.py``), they run in-process
under whatever setting the environment has.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import CACHE, REPO

BUILD = REPO / "examples" / "build_keras.py"
ONEDNN_RUN_ENV = "DLSCHED_TEST_ONEDNN"  # set to "0"/"1" in the runner's subprocesses
ONEDNN_RUNNER = "test_tf_onednn.py"


def pytest_configure(config):
    config.addinivalue_line("markers", "tf_onednn: a TF profiler/timeline test, run with TF_ENABLE_ONEDNN_OPTS=0 "
                                       "and =1 in subprocesses by tests/test_tf_onednn.py")


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: a deselected runner runs nothing
def pytest_collection_modifyitems(config, items):
    if os.environ.get(ONEDNN_RUN_ENV) or not any(item.path.name == ONEDNN_RUNNER for item in items):
        return
    skip = pytest.mark.skip(reason=f"runs in the TF_ENABLE_ONEDNN_OPTS=0 and =1 subprocesses of tests/{ONEDNN_RUNNER}")
    for item in items:
        if item.get_closest_marker("tf_onednn"):
            item.add_marker(skip)


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
def keras_efficientnetb0() -> dict:
    """Keras EfficientNetB0 at 64×64: its swish activations are ``tf.custom_gradient`` ops."""
    return _build_keras("efficientnetb0")


@pytest.fixture(scope="session")
def tf1_graphs() -> dict:
    """The TF1 ``VariableV2`` MLP as ``graphdef`` (.pb), ``pbtxt`` and ``frozen`` (.pb)."""
    from examples.build_keras import TF1_VARIABLES, build_tf1

    paths = build_tf1(CACHE)
    paths["variables"] = TF1_VARIABLES
    return paths


@pytest.fixture(scope="session")
def keras_corpus():
    """``build(name)`` → the corpus model's SavedModel folders (``tf_saved_model``, ``export``) and counts."""
    from examples.build_keras import SAVE_STYLES, corpus_paths

    def build(name: str) -> dict:
        paths = corpus_paths(name, CACHE)
        if not (paths["counts"].exists() and all((paths[s] / "saved_model.pb").exists() for s in SAVE_STYLES)):
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
            subprocess.run([sys.executable, str(BUILD), str(CACHE), "--corpus", name], check=True, env=env,
                           capture_output=True, text=True, timeout=900)
        paths["keras"] = json.loads(paths["counts"].read_text())
        return paths

    return build
