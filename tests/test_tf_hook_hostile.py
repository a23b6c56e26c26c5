"""The TF cluster example's servers never outlive their launcher (issue 16, acceptance 3).

``examples/tf_cluster_example.py`` starts a ps and a worker ``tf.distribute.Server``
as child processes, then trains through a session on them. Whatever ends the
launcher (SIGTERM, SIGINT, SIGKILL), during training or while the servers are
still starting, no server process may be left within twice the configured
``--timeout``. Real processes, checked in the process table (``/proc``): the
servers are found by an environment marker that only this test's launcher
passes on, and by ``--serve`` in their command line.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, marked_processes

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="scans the /proc process table")]

EXAMPLE = "examples/tf_cluster_example.py"
TIMEOUT = 15  # the example's --timeout; no server may be left 2x this after the signal
SERVE = b"\x00--serve\x00"  # in /proc/PID/cmdline: a server, not the launcher


def _servers(marker: str) -> dict[int, dict]:
    """Live server processes carrying ``marker``: pid -> the cluster spec from their command line."""
    found = {}
    for pid, argv in marked_processes(marker, SERVE).items():
        try:
            found[pid] = json.loads(argv[argv.index(b"--serve") + 1])
        except (ValueError, IndexError):  # not a server's command line after all
            continue
    return found


def _accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def _connected_to(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds an established TCP connection to ``port`` (its session is open)."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return False
    inodes = {s[len("socket:["):-1] for s in inodes if s.startswith("socket:[")}
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()  # sl local remote st ... inode
            if int(f[2].rsplit(":", 1)[1], 16) == port and f[3] == "01" and f[9] in inodes:
                return True
    return False


def _wait_until(predicate, seconds: float, step: float = 0.1) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def _start(marker: str, log: Path) -> subprocess.Popen:
    env = dict(os.environ, DLSCHED_TEST_MARKER=marker, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    with open(log, "w") as err:  # a file, not a pipe nobody reads while the test waits
        return subprocess.Popen([sys.executable, EXAMPLE, "--steps", "1000000", "--timeout", str(TIMEOUT)], cwd=REPO,
                                env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)


def _kill_leftovers(marker: str, launcher: subprocess.Popen) -> None:
    """Clean up after a failing run: only processes this test started (directly or through the launcher)."""
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait()
    for pid in _servers(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _signal_and_check(launcher: subprocess.Popen, marker: str, sig: signal.Signals, log: Path) -> None:
    """Send ``sig`` to the launcher; every server must be gone within 2 x TIMEOUT of it."""
    os.kill(launcher.pid, sig)
    t0 = time.monotonic()
    gone = _wait_until(lambda: not _servers(marker), 2 * TIMEOUT)
    assert gone, f"server processes {sorted(_servers(marker))} outlived the launcher ({sig.name}) by {2 * TIMEOUT} s"
    print(f"{sig.name}: last server gone {time.monotonic() - t0:.2f} s after the signal")
    launcher.wait(2 * TIMEOUT)
    print(f"{sig.name}: launcher ended {time.monotonic() - t0:.2f} s after the signal")
    if sig != signal.SIGKILL:  # a clean end: the shell's code for death by that signal, no traceback
        err = log.read_text()
        assert launcher.returncode == 128 + sig, (launcher.returncode, err)
        assert "Traceback" not in err, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name)
def test_no_server_survives_the_launcher_during_training(tmp_path, sig):
    marker, log = uuid.uuid4().hex, tmp_path / "launcher.err"
    launcher = _start(marker, log)
    try:
        def up():  # both servers serve gRPC, and the launcher's session is connected to the worker
            servers = _servers(marker)
            if len(servers) != 2 or launcher.poll() is not None:
                return launcher.poll() is not None
            cluster = next(iter(servers.values()))
            worker = cluster["worker"][0]
            return (_accepts(cluster["ps"][0]) and _accepts(worker)
                    and _connected_to(launcher.pid, int(worker.rsplit(":", 1)[1])))
        assert _wait_until(up, 90) and launcher.poll() is None, "the cluster never started: " + log.read_text()
        time.sleep(0.5)  # a few steps in
        assert launcher.poll() is None, log.read_text()
        _signal_and_check(launcher, marker, sig, log)
    finally:
        _kill_leftovers(marker, launcher)


@pytest.mark.parametrize("sig,delay", [(signal.SIGTERM, 1.0), (signal.SIGKILL, 0.0), (signal.SIGKILL, 1.0)],
                         ids=["SIGTERM-importing", "SIGKILL-at-exec", "SIGKILL-importing"])
def test_no_server_survives_the_launcher_during_start_up(tmp_path, sig, delay):
    """The signal comes as soon as the servers exist (before they can watch the launcher), or
    ``delay`` seconds later, while they import TensorFlow (seconds, before they serve)."""
    marker, log = uuid.uuid4().hex, tmp_path / "launcher.err"
    launcher = _start(marker, log)
    try:
        started = _wait_until(lambda: len(_servers(marker)) == 2 or launcher.poll() is not None, 60, 0.02)
        assert started and launcher.poll() is None, "the servers never started: " + log.read_text()
        time.sleep(delay)
        cluster = next(iter(_servers(marker).values()), None)
        assert cluster and not _accepts(cluster["worker"][0]), "the worker already serves: not start-up any more"
        _signal_and_check(launcher, marker, sig, log)
    finally:
        _kill_leftovers(marker, launcher)
