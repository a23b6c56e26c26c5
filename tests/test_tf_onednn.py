"""The TF profiler and TF timeline tests, once with oneDNN off and once on, each in its own process.

TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS`` once, at import, and the setting
decides which nodes run as one fused kernel (oneDNN's ``_MklNative*`` rewrites
or only Grappler's ``_Fused*`` ones), so one process cannot test both. The
two settings' ``python -m pytest`` runs of the tests marked ``tf_onednn`` start
together (each profiles on one intra-op thread, so each has a core of its own
on this 2-core machine), and each parameter passes when its run passes; its
output is shown when it fails. The marked tests are skipped in this (main) process whenever this
module is collected with them (``tests/fixtures_tf.py``), so ``make test`` runs
them twice, not three times.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.fixtures_tf import ONEDNN_RUN_ENV

TIMEOUT = 1200  # seconds per setting; a normal run takes about a minute


@pytest.fixture(scope="module")
def onednn_runs(request, tmp_path_factory):
    """Both settings' subprocesses, started together: the profiler runs each on one intra-op thread, so on a
    2-core machine they take a core each, and the pair costs the slower one's time instead of the sum."""
    if os.environ.get(ONEDNN_RUN_ENV):
        pytest.skip("already inside a oneDNN test subprocess")
    # Exactly the marked tests this session selected (and skipped here); all of them when run alone.
    ids = [item.nodeid for item in request.session.items if item.get_closest_marker("tf_onednn")]
    selection = ids or ["tests", "-m", "tf_onednn"]
    folder = tmp_path_factory.mktemp("onednn")
    runs = {}
    for onednn in ("0", "1"):
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="3", **{ONEDNN_RUN_ENV: onednn})
        log = open(folder / f"onednn{onednn}.log", "w+")  # a file, not a pipe: neither run can block on output
        proc = subprocess.Popen([sys.executable, "-m", "pytest", *selection, "-q", "-s", "-p", "no:cacheprovider"],
                                cwd=request.config.rootpath, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        runs[onednn] = (proc, log, time.perf_counter())
    yield runs
    for proc, log, _ in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.slow
@pytest.mark.parametrize("onednn", ["0", "1"])
def test_tf_tests_pass_with_onednn(onednn, onednn_runs):
    proc, log, start = onednn_runs[onednn]
    proc.wait(timeout=TIMEOUT)
    wall = time.perf_counter() - start
    log.seek(0)
    out = log.read()
    print(f"\nTF tests with TF_ENABLE_ONEDNN_OPTS={onednn}: exit {proc.returncode} in {wall:.1f} s (run beside the "
          "other setting)\n"
          + "\n".join(line for line in out.splitlines() if line.startswith(("ResNet50", "TF1 timeline", "EfficientNet"))
                      or " passed" in line or " failed" in line))
    assert proc.returncode == 0, (f"the tf_onednn tests failed with TF_ENABLE_ONEDNN_OPTS={onednn} "
                                  f"(exit {proc.returncode}):\n{out[-30000:]}")
