"""The TF profiler and TF timeline tests, once with oneDNN off and once on, each in its own process.

TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS`` once, at import, and the setting
decides which nodes run as one fused kernel (oneDNN's ``_MklNative*`` rewrites
or only Grappler's ``_Fused*`` ones), so one process cannot test both. Each
parameter starts ``python -m pytest`` on the tests marked ``tf_onednn`` with
the variable set, and passes when that run passes; its output is shown when
it fails. The marked tests are skipped in this (main) process whenever this
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


@pytest.mark.slow
@pytest.mark.parametrize("onednn", ["0", "1"])
def test_tf_tests_pass_with_onednn(onednn, request):
    if os.environ.get(ONEDNN_RUN_ENV):
        pytest.skip("already inside a oneDNN test subprocess")
    # Exactly the marked tests this session selected (and skipped here); all of them when run alone.
    ids = [item.nodeid for item in request.session.items if item.get_closest_marker("tf_onednn")]
    selection = ids or ["tests", "-m", "tf_onednn"]
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="3", **{ONEDNN_RUN_ENV: onednn})
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", *selection, "-q", "-s", "-p", "no:cacheprovider"],
                          cwd=request.config.rootpath, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    wall = time.perf_counter() - start
    out = proc.stdout + proc.stderr
    print(f"\nTF tests with TF_ENABLE_ONEDNN_OPTS={onednn}: exit {proc.returncode} in {wall:.1f} s\n"
          + "\n".join(line for line in out.splitlines() if line.startswith(("ResNet50", "TF1 timeline")) or
                      " passed" in line or " failed" in line))
    assert proc.returncode == 0, (f"the tf_onednn tests failed with TF_ENABLE_ONEDNN_OPTS={onednn} "
                                  f"(exit {proc.returncode}):\n{out[-30000:]}")
