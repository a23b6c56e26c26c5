"""Outputs that cannot be written, and runs cut short: exit 2 or the signal's code, never a
traceback, never a partial or temporary file (issue 16, items 4 and 10)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, REPO, assert_clean_error, run_cli

MODEL = f"{EXAMPLES / 'torch_models.py'}:small_cnn"


@pytest.fixture(scope="module")
def gate_files(tmp_path_factory):
    """A DAG, an oracle and a baseline of the small CNN, made once."""
    d = tmp_path_factory.mktemp("gate")
    dag, orc, base = d / "m.dag.json", d / "o.csv", d / "b.json"
    assert run_cli("inspect", MODEL, "--batch", "2", "--save", dag).returncode == 0
    assert run_cli("profile", dag, "--analytic", "-o", orc).returncode == 0
    p = run_cli("snapshot", dag, "-o", base)
    assert p.returncode == 0, p.stderr
    return dag, orc, base


def _commands(gate_files, target: Path):
    dag, orc, base = gate_files
    return {
        "profile -o": ("profile", dag, "--analytic", "-o", target),
        "inspect --save": ("inspect", dag, "--save", target),
        "snapshot -o": ("snapshot", dag, "-o", target),
        "check --junit": ("check", dag, "--baseline", base, "--junit", target),
        "order -o": ("order", dag, "--algo", "tic", "-o", target),
    }


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize("which", ["profile -o", "inspect --save", "snapshot -o", "check --junit", "order -o"])
def test_output_under_a_file_exits_2(gate_files, tmp_path, which):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    target = blocker / "out.file"
    proc = run_cli(*_commands(gate_files, target)[which])
    assert_clean_error(proc, str(target), "cannot write")


def test_output_that_is_a_directory_exits_2(gate_files, tmp_path):
    proc = run_cli(*_commands(gate_files, tmp_path)["inspect --save"])
    assert_clean_error(proc, str(tmp_path), "directory")


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs filled to the brim; needs root to mount."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tiny tmpfs to simulate a full disk needs root")
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("this sandbox does not allow mounting tmpfs")
    try:
        with open(mnt / "filler", "wb") as f:
            try:
                f.write(b"\0" * (1 << 20))
            except OSError:
                pass
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)])


@pytest.mark.parametrize("which", ["profile -o", "snapshot -o", "check --junit", "inspect --save"])
def test_full_disk_exits_2_and_leaves_nothing(gate_files, full_disk, which):
    target = full_disk / "out.file"
    proc = run_cli(*_commands(gate_files, target)[which])
    assert_clean_error(proc, str(target), "cannot write")
    assert _leftovers(full_disk) == ["filler"]


def test_check_update_on_full_disk_is_not_a_regression(gate_files, full_disk):
    dag, _, base = gate_files
    copy = full_disk / "b.json"
    os.remove(full_disk / "filler")
    shutil.copy(base, copy)
    with open(full_disk / "filler", "wb") as f:
        try:
            f.write(b"\0" * (1 << 20))
        except OSError:
            pass
    proc = run_cli("check", dag, "--baseline", copy, "--update")
    assert_clean_error(proc, str(copy))
    assert copy.read_text() == Path(base).read_text()
    assert _leftovers(full_disk) == ["b.json", "filler"]


def _wait_for_temp(folder: Path, timeout: float = 60) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(p.name.startswith(".") for p in folder.iterdir()):
            return True
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_an_atomic_write_leaves_no_temp_file(tmp_path, sig):
    """Stop a process in the middle of an atomic write; its temp file must go with it."""
    script = (
        "import signal, sys, time\n"
        "from dlsched.cli.main import _exit_on_sigterm\n"
        "signal.signal(signal.SIGTERM, _exit_on_sigterm)\n"
        "from dlsched.atomic import atomic_open\n"
        f"with atomic_open({str(tmp_path / 'out.txt')!r}) as f:\n"
        "    f.write('partial'); f.flush()\n"
        "    time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for_temp(tmp_path), "the writer never created its temp file"
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode != 0
    assert _leftovers(tmp_path) == [], err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_right_after_the_temp_file_is_created_leaves_nothing(tmp_path, sig):
    """The gap between a temp file's creation and the guard that removes it (issue 32, item 6): a signal
    landing there, here sent by the process to itself the moment the file exists, must not leave it."""
    script = (
        "import os, signal\n"
        "from dlsched import atomic\n"
        "from dlsched.cli.main import _exit_on_sigterm\n"
        "signal.signal(signal.SIGTERM, _exit_on_sigterm)\n"
        "create = atomic._temp_beside\n"
        "def create_then_signal(path, suffix):\n"
        "    tmp = create(path, suffix)\n"
        f"    os.kill(os.getpid(), {int(sig)})\n"
        "    return tmp\n"
        "atomic._temp_beside = create_then_signal\n"
        f"with atomic.atomic_open({str(tmp_path / 'out.txt')!r}) as f:\n"
        "    f.write('never')\n"
    )
    p = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p.stderr
    assert _leftovers(tmp_path) == [], p.stderr
