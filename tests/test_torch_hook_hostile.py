"""Hostile input to the PyTorch parameter-server hook (issue 16, items 2, 7, 13, 16).

Every bad setting or priority file is refused before any process starts, with
one message and exit code 2 from the example launcher; the ranks never outlive
their launcher, whatever signal ends it; the job directory is removed unless the
caller asks to keep it. Real processes throughout, no mocks.

Which test covers which item:

- item 2 (orphans): ``test_no_rank_survives_the_launcher``,
  ``test_ctrl_c_on_the_example_ends_every_rank``, ``test_rank_watches_its_launcher``
- item 7 (fingerprint): ``test_priority_file_for_another_graph_is_refused``,
  ``test_json_priority_file_without_fingerprint_is_refused``,
  ``test_tictac_names_must_match_exactly``, ``test_example_refuses_a_forged_priority_file``
- item 13 (configuration): ``test_bad_settings_are_refused``,
  ``test_example_refuses_bad_settings``
- item 16 (job directories): ``test_job_directory_is_removed``,
  ``test_job_directory_is_kept_on_request`` (and the signal tests, which check
  that SIGTERM / Ctrl-C leave no directory either)
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_clean_error, marked_processes

pytestmark = pytest.mark.timeout(300)

SMALL = "examples/torch_models.py:small_cnn"
RANK_MODULE = b"-m\x00dlsched.hooks.torch_ps\x00"  # in /proc/PID/cmdline: a rank, not a launcher naming the module
TIMEOUT = 10  # the job's per-transfer timeout in the signal tests; ranks must be gone within 2x this


# -- helpers ---------------------------------------------------------------------------------------

def _marked(marker: str) -> list[int]:
    """Pids of live rank processes whose environment holds ``marker``."""
    return sorted(marked_processes(marker, RANK_MODULE))


def _wait_until(predicate, seconds: float, step: float = 0.2) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def _env(marker: str, tmp: Path) -> dict:
    # TMPDIR: the launcher makes its job directory there, so the test sees whether it is removed
    return dict(os.environ, DLSCHED_TEST_MARKER=marker, TMPDIR=str(tmp), PYTHONWARNINGS="ignore",
                PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _job_dirs(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("dlsched-ps-"))


def _kill_leftovers(marker: str, *procs) -> None:
    """Clean up after a failing run: only processes this test started (directly or through the launcher)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for pid in _marked(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


needs_proc = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="scans the /proc process table")

# A launcher of a long job (100,000 iterations: minutes of training) that a signal then ends.
DRIVER = f"""
from dlsched.hooks.torch_ps import PSConfig, launch_local, order_from_module
cfg = PSConfig(model={SMALL!r}, order=order_from_module({SMALL!r}), servers=2, workers=2,
               iterations=100000, batch=4, timeout={TIMEOUT})
launch_local(cfg)
"""


# -- item 2: no orphans ----------------------------------------------------------------------------

@needs_proc
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_no_rank_survives_the_launcher(tmp_path, sig):
    marker = uuid.uuid4().hex
    launcher = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=REPO, env=_env(marker, tmp_path),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        started = _wait_until(lambda: len(_marked(marker)) == 4 or launcher.poll() is not None, 120)
        assert started and launcher.poll() is None, "the four ranks never started"
        time.sleep(3)  # into the rendezvous and training
        assert launcher.poll() is None, launcher.stderr.read()
        os.kill(launcher.pid, sig)
        launcher.wait(30)
        t0 = time.monotonic()
        gone = _wait_until(lambda: not _marked(marker), 2 * TIMEOUT)
        assert gone, f"rank processes {_marked(marker)} outlived the launcher by {2 * TIMEOUT} s"
        print(f"{sig.name}: last rank gone {time.monotonic() - t0:.2f} s after the launcher")
        if sig == signal.SIGTERM:
            err = launcher.stderr.read()
            assert launcher.returncode == 128 + sig, (launcher.returncode, err)
            assert "Traceback" not in err, err
            assert _job_dirs(tmp_path) == []  # the launcher cleaned up on its way out
    finally:
        _kill_leftovers(marker, launcher)


@needs_proc
def test_ctrl_c_on_the_example_ends_every_rank(tmp_path):
    marker = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "examples/ps_train_torch.py", "--iterations", "100000", "--timeout",
                             str(TIMEOUT)], cwd=REPO, env=_env(marker, tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        started = _wait_until(lambda: len(_marked(marker)) == 4 or proc.poll() is not None, 120)
        assert started and proc.poll() is None, "the four ranks never started: " + proc.stderr.read()
        time.sleep(3)
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert _wait_until(lambda: not _marked(marker), 2 * TIMEOUT), _marked(marker)
        assert proc.returncode == 128 + signal.SIGINT, (proc.returncode, out + err)
        assert "Traceback" not in err, err
        assert _job_dirs(tmp_path) == []
    finally:
        _kill_leftovers(marker, proc)


WATCHED = """
import sys, time
from dlsched.hooks.torch_ps import watch_launcher
watch_launcher(int(sys.argv[1]), interval=0.2, deathsig=False)
print("watching", flush=True)
time.sleep(120)
"""
MIDDLE = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())], stdout=subprocess.PIPE, text=True)
line = child.stdout.readline().strip()
print(child.pid, line, flush=True)
child.wait()
"""


@needs_proc
def test_rank_watches_its_launcher(tmp_path):
    """The portable fallback alone (no kernel death signal): the child notices its parent's SIGKILL."""
    marker = uuid.uuid4().hex
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, WATCHED], cwd=REPO, env=_env(marker, tmp_path),
                              stdout=subprocess.PIPE, text=True)
    child = None
    try:
        pid, state = middle.stdout.readline().split()
        child = int(pid)
        assert state == "watching"
        os.kill(middle.pid, signal.SIGKILL)
        middle.wait()

        def child_gone():
            try:
                stat = Path(f"/proc/{child}/stat").read_text()
            except OSError:
                return True
            return stat[stat.rindex(")") + 2] in "ZX"
        assert _wait_until(child_gone, 5, 0.05), "the watched process outlived its launcher"
    finally:
        if middle.poll() is None:
            middle.kill()
            middle.wait()
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- item 7: the priority file must be for the graph being trained ---------------------------------

def _graph(mode):
    from dlsched.importers.loader import load_model
    return load_model(SMALL, mode=mode, ps=2)


def _write(tmp_path, graph, name="p.json", fmt="json"):
    from dlsched.formats.priority_file import make_priority_file, write_priority_file
    path = tmp_path / name
    pf = make_priority_file(graph, {r.name: i for i, r in enumerate(reversed(graph.recvs()))}, "test")
    write_priority_file(pf, path, fmt)
    return path


def test_priority_file_for_another_graph_is_refused(tmp_path):
    from dlsched.errors import PriorityFileError
    from dlsched.hooks.torch_ps import config_from_priority_file
    good = _write(tmp_path, _graph("training"))
    cfg = config_from_priority_file(SMALL, good, servers=2, workers=2)
    assert cfg.order[0] == "fc2.bias"
    # a forged fingerprint
    forged = tmp_path / "forged.json"
    doc = json.loads(good.read_text())
    doc["model"]["fingerprint"] = "0123456789abcdef"
    forged.write_text(json.dumps(doc))
    with pytest.raises(PriorityFileError, match="fingerprint 0123456789abcdef") as ei:
        config_from_priority_file(SMALL, forged, servers=2, workers=2)
    assert str(forged) in str(ei.value)
    # a file made for the inference graph of the same model: same names, other fingerprint
    inference = _write(tmp_path, _graph("inference"), "inference.json")
    with pytest.raises(PriorityFileError, match="mode training"):
        config_from_priority_file(SMALL, inference, servers=2, workers=2)
    assert config_from_priority_file(SMALL, inference, servers=2, workers=2, mode="inference").mode == "inference"


@pytest.mark.parametrize("edit", [lambda d: d["model"].pop("fingerprint"), lambda d: d.pop("model"),
                                  lambda d: d["model"].update(fingerprint="")],
                         ids=["no-fingerprint", "no-model", "empty-fingerprint"])
def test_json_priority_file_without_fingerprint_is_refused(tmp_path, edit):
    from dlsched.errors import PriorityFileError
    from dlsched.formats.priority_file import read_priority_file
    from dlsched.hooks.torch_ps import config_from_priority_file
    path = _write(tmp_path, _graph("training"))
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(PriorityFileError, match="no model fingerprint"):
        read_priority_file(path)
    with pytest.raises(PriorityFileError, match="no model fingerprint"):
        config_from_priority_file(SMALL, path, servers=2, workers=2)


def test_tictac_names_must_match_exactly(tmp_path):
    from dlsched.errors import PriorityFileError
    from dlsched.hooks.torch_ps import config_from_priority_file
    path = _write(tmp_path, _graph("training"), "p.tsv", "tictac")
    assert len(config_from_priority_file(SMALL, path, servers=2, workers=2).order) == 10
    lines = path.read_text().splitlines()
    short = tmp_path / "short.tsv"
    short.write_text("\n".join(lines[1:]) + "\n")  # one parameter left out
    with pytest.raises(PriorityFileError, match=r"missing parameters \['fc2.bias'\]") as ei:
        config_from_priority_file(SMALL, short, servers=2, workers=2)
    assert str(short) in str(ei.value)
    extra = tmp_path / "extra.tsv"
    extra.write_text(path.read_text() + "ghost.weight\t99\n")
    with pytest.raises(PriorityFileError, match="ghost.weight"):
        config_from_priority_file(SMALL, extra, servers=2, workers=2)


def test_example_refuses_a_forged_priority_file(tmp_path):
    forged = _write(tmp_path, _graph("training"))
    doc = json.loads(forged.read_text())
    doc["model"]["fingerprint"] = "0123456789abcdef"
    forged.write_text(json.dumps(doc))
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    proc = subprocess.run([sys.executable, "examples/ps_train_torch.py", "--priorities", str(forged)], cwd=REPO,
                          env=_env("none", jobs), capture_output=True, text=True, timeout=180)
    assert_clean_error(proc, str(forged), "fingerprint")
    assert _job_dirs(jobs) == []  # refused before any process started


# -- item 13: nonsense configurations --------------------------------------------------------------

@pytest.mark.parametrize("kw,needle", [
    ({"workers": 0}, "workers must be at least 1, got 0"),
    ({"servers": 0}, "servers must be at least 1, got 0"),
    ({"iterations": 0}, "iterations must be at least 1"),
    ({"batch": -3}, "batch must be at least 1"),
    ({"window": 0}, "window must be at least 1"),
    ({"threads": 0}, "threads must be at least 1"),
    ({"workers": 2.5}, "workers must be a whole number"),
    ({"workers": True}, "workers must be a whole number"),
    ({"timeout": 0}, "timeout must be a finite number"),
    ({"timeout": math.inf}, "timeout must be a finite number"),
    ({"timeout": 1e300}, "timeout must be a finite number"),
    ({"lr": math.nan}, "lr must be a finite number"),
    ({"lr": -0.1}, "lr must be a finite number"),
    ({"momentum": 1.5}, "momentum must be a finite number"),
    ({"mode": "train"}, "mode must be one of 'training', 'inference'"),
    ({"device": "tpu"}, "device must be"),
    ({"fail_how": "crash"}, "fail_how must be one of"),
    ({"fail_worker": 2}, "fail_worker must be a worker index below workers=2"),
    ({"seed": -1}, "seed must be between 0"),
    ({"unordered": "yes"}, "unordered must be true or false"),
    ({"model_kwargs": {"f": object()}}, "model_kwargs must be a JSON object"),
    ({"order": []}, "order must be a non-empty list"),
    ({"order": ["conv1.weight", "conv1.weight"]}, "order lists 'conv1.weight' more than once"),
    ({"ps": {"ghost": 0}}, "ps names 'ghost'"),
    ({"ps": {"conv1.weight": -1}}, r"ps\['conv1.weight'\] must be a server index"),
    ({"model": "no-colon"}, "model must be a factory"),
    ({"rotation": [["conv1.bias"]]}, r"rotation\[0\] must be a permutation of the order or null"),
    ({"rotation": [None, ["conv1.bias", 3]]}, r"rotation\[1\] must be a permutation"),
    ({"rotation": "tac"}, "rotation must be a list of orders"),
    ({"rotation": [None], "unordered": True}, "rotation and unordered exclude each other"),
], ids=lambda v: ",".join(f"{k}={v[k]!r:.14}" for k in v) if isinstance(v, dict) else "why")
def test_bad_settings_are_refused(kw, needle):
    from dlsched.errors import DlschedError
    from dlsched.hooks.torch_ps import PSConfig, PSConfigError, check_settings
    args = {"model": SMALL, "order": ["conv1.weight", "conv1.bias"], **kw}
    with pytest.raises(PSConfigError, match=needle) as ei:
        PSConfig(**args)
    assert isinstance(ei.value, DlschedError) and ei.value.exit_code == 2
    assert str(ei.value).startswith("invalid parameter-server configuration: ")
    scalar = {k: v for k, v in kw.items() if k not in ("model", "order", "ps", "rotation")}
    if scalar and "fail_worker" not in scalar and "rotation" not in kw:  # the settings alone, as the example checks them first
        with pytest.raises(PSConfigError, match=needle):
            check_settings(**scalar)


def test_good_settings_are_normalised():
    import numpy as np
    from dlsched.hooks.torch_ps import PSConfig
    cfg = PSConfig(model=SMALL, order=["a", "b"], ps={"a": np.int64(1)}, workers=np.int64(3), lr=np.float32(0.5),
                   timeout=5)
    assert type(cfg.workers) is int and type(cfg.lr) is float and type(cfg.timeout) is float
    json.dumps(cfg.__dict__)  # every rank reads it from JSON


@pytest.mark.parametrize("args,needle", [(["--workers", "0"], "workers must be at least 1"),
                                         (["--servers", "0"], "servers must be at least 1"),
                                         (["--timeout", "nan"], "timeout must be a finite number")],
                         ids=["workers-0", "servers-0", "timeout-nan"])
def test_example_refuses_bad_settings(tmp_path, args, needle):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "examples/ps_train_torch.py", *args], cwd=REPO,
                          env=_env("none", tmp_path), capture_output=True, text=True, timeout=120)
    assert_clean_error(proc, needle)
    assert time.monotonic() - t0 < 60  # no waiting for a rendezvous that cannot happen
    assert _job_dirs(tmp_path) == []


# -- item 16: job directories ----------------------------------------------------------------------

def _small_cfg(**kw):
    from dlsched.hooks.torch_ps import PSConfig, order_from_module
    return PSConfig(model=SMALL, order=order_from_module(SMALL), **{"servers": 1, "workers": 1, "iterations": 2,
                                                                    "batch": 2, "timeout": 20, **kw})


def test_job_directory_is_removed(tmp_path):
    from dlsched.hooks.torch_ps import PSTrainingError, launch_local
    run = launch_local(_small_cfg(), workdir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    assert len(run.params) == 10 and run.workdir is None
    # a failed job too: its stderr is already in the error, the directory is not needed
    with pytest.raises(PSTrainingError) as ei:
        launch_local(_small_cfg(fail_worker=0, fail_iteration=0), workdir=str(tmp_path), timeout=60)
    assert list(tmp_path.iterdir()) == []
    assert ei.value.returncodes[1] == 17 and ei.value.workdir is None


def test_job_directory_is_kept_on_request(tmp_path):
    from dlsched.hooks.torch_ps import launch_local
    run = launch_local(_small_cfg(), workdir=str(tmp_path), keep=True)
    kept = Path(run.workdir)
    assert kept.parent == tmp_path and kept.name.startswith("dlsched-ps-")
    assert sorted(p.name for p in kept.iterdir()) == ["config.json", "rank0.err", "rank0.pt", "rank1.err",
                                                       "rank1.pt"]


def test_bad_launch_arguments_are_refused(tmp_path):
    from dlsched.hooks.torch_ps import PSConfigError, launch_local
    with pytest.raises(PSConfigError, match="timeout must be a finite number"):
        launch_local(_small_cfg(), timeout=-1, workdir=str(tmp_path))
    with pytest.raises(PSConfigError, match="prefixes must have one entry per rank"):
        launch_local(_small_cfg(), prefixes=[[]], workdir=str(tmp_path))
    with pytest.raises(PSConfigError, match="cannot create the job directory"):
        launch_local(_small_cfg(), workdir=str(tmp_path / "missing"))
    assert list(tmp_path.iterdir()) == []
