"""The real jobs against hostile input (issue 32): budgets for ranks, real steps and replayed steps, outputs
checked before any process starts, validate runs that share a host, and what dead runs left behind.

Every refusal here comes before a process starts: the budgets are estimated from the options alone.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dlsched.runtime import cgroups, netns
from dlsched.runtime.launcher import job_directory
from tests.conftest import REPO, assert_clean_error, run_cli

SMALL = "examples/torch_models.py:small_cnn"


@pytest.mark.parametrize("args, option", [
    (("train-allreduce", "--processes", "10000"), "--processes"),
    (("train-allreduce", "--iterations", "10000000"), "--iterations"),
    (("train-allreduce", "--iterations", "1000000000"), "--iterations"),
    (("train-ps", SMALL, "--workers", "10000"), "--workers"),
    (("train-ps", SMALL, "--iterations", "1000000000"), "--iterations"),
    (("validate", SMALL, "--workers", "10000"), "--workers"),
    (("replay-batch", "--iterations", "1000000000"), "--iterations"),
    (("replay-batch", "--workers", "1000000"), "--workers"),
])
def test_absurd_real_work_is_refused_before_anything_starts(args, option):
    """Exit 2 naming the estimate, the option to lower and --max-work, which lifts it; no traceback."""
    assert_clean_error(run_cli(*args, timeout=120), "would take about", option, "--max-work")


def test_max_work_lifts_a_budget():
    refused = run_cli("replay-batch", "--workers", "300", "--iterations", "10000", "--policy", "bsp",
                      "--max-work", "2999999")
    assert_clean_error(refused, "3,000,000 replayed worker-steps", "--max-work 3000000")
    ok = run_cli("replay-batch", "--workers", "300", "--iterations", "10000", "--policy", "bsp", "--max-work", "3000000",
                 "--json", "--noise", "0")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["iterations"] == 10000


@pytest.mark.parametrize("args", [
    ("train-ps", SMALL, "--workers", "2", "--iterations", "2", "--plot", "/proc/version/plot.png"),
    ("validate", SMALL, "--iterations", "2", "--trace-out", "/proc/version/traces"),
    ("validate", SMALL, "--iterations", "2", "--plot", "/proc/version/v.png"),
    ("replay-batch", "--plot", "/proc/version/b.png"),
])
def test_an_unwritable_output_is_refused_before_the_run(args):
    """A read-only or impossible output path: exit 2 at once, not after the whole run (issue 32, item 5)."""
    proc = run_cli(*args, timeout=120)
    assert_clean_error(proc, "/proc/version", "cannot write the output")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.skipif(not netns.available(), reason="needs root with ip and tc (network namespaces)")
def test_namespaces_of_a_dead_run_are_swept_and_a_live_runs_kept():
    dead, live = _dead_pid(), os.getpid()
    made = [f"dls{dead}_hub", f"dls{dead}_h0", f"dls{live}_h7"]
    try:
        for ns in made:
            netns.sh("ip", "netns", "add", ns)
        gone = netns.sweep()
        listed = netns.sh("ip", "netns", "list").stdout
        assert {f"dls{dead}_hub", f"dls{dead}_h0"} <= set(gone) and f"dls{dead}_" not in listed
        assert f"dls{live}_h7" in listed and f"dls{live}_h7" not in gone
    finally:
        for ns in made:
            netns.sh("ip", "netns", "del", ns, check=False)


@pytest.mark.skipif(cgroups.unavailable() is not None, reason="needs cgroup v1 cpu cgroups (root)")
def test_cgroups_of_a_dead_run_are_swept():
    dead = _dead_pid()
    left = cgroups.CPU_ROOT / f"dlsched-w0-{dead}-{uuid.uuid4().hex[:8]}"
    left.mkdir()
    try:
        with cgroups.CpuCgroup(0.5) as mine:  # a new run sweeps first
            assert not left.exists() and mine.path.exists()
    finally:
        if left.exists():
            left.rmdir()


def test_job_directories_of_a_dead_launcher_are_swept(tmp_path):
    dead = _dead_pid()
    left, live = tmp_path / f"dlsched-ps-{dead}-abc123", tmp_path / f"dlsched-ps-{os.getpid()}-def456"
    for d in (left, live):
        d.mkdir()
        (d / "rank0.err").write_text("x")
    new = Path(job_directory("dlsched-ps-", str(tmp_path)))
    assert not left.exists() and live.exists() and new.name.startswith(f"dlsched-ps-{os.getpid()}-")


@pytest.mark.skipif(not netns.available(), reason="needs root with ip and tc (network namespaces, tc-shaped link)")
def test_two_validate_runs_on_one_host_both_finish(tmp_path):
    """Each run has namespaces of its own (named after its pid); neither deletes the other's (issue 32, item 2)."""
    cmd = [sys.executable, "-m", "dlsched.cli.main", "validate", SMALL, "--rate", "100mbit", "--orders", "random,tac",
           "--iterations", "2", "--warmup", "1", "--batch", "4", "--json"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    runs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
            for _ in range(2)]
    outs = [p.communicate(timeout=400) for p in runs]
    for p, (out, err) in zip(runs, outs):
        assert p.returncode == 0, err[-2000:]
        assert json.loads(out)["hosts"]["kind"] == "netns"
    # the two runs' own namespaces are gone (another test's live cluster may be up beside them)
    ours = tuple(f"dls{p.pid}_" for p in runs)
    assert not [ns for ns in netns.sh("ip", "netns", "list").stdout.split() if ns.startswith(ours)]
