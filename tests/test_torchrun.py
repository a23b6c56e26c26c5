"""Every hook in a user's own script under torchrun (issue 29, item 5): the examples in examples/torchrun/,
launched by the real ``torchrun`` on one machine and on two (two network namespaces, a c10d rendezvous on
the bridge), train to the single-process parameters; killing one machine ends the other's job with the
hook's ``dlsched: error:`` line and its exit code 2 (torchrun itself exits 1).

Run under ``flock /tmp/dlsched-heavy.lock``: each test starts real processes. Every process has a bound.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO

EXAMPLES = REPO / "examples" / "torchrun"
TORCHRUN = Path(sys.executable).with_name("torchrun")
STEPS, BATCH, LR = 5, 4, 0.1
TIMEOUT = 10  # the hook's per-wait timeout in the kill test


def _toy():
    spec = importlib.util.spec_from_file_location("torchrun_toy", EXAMPLES / "toy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _torchrun(*args: str) -> list[str]:
    return ([str(TORCHRUN)] if TORCHRUN.exists() else [sys.executable, "-m", "torch.distributed.run"]) + list(args)


def _env(ifname: str = "lo") -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=ifname, PYTHONWARNINGS="ignore",
                PYTHONFAULTHANDLER="1")  # a hung run's SIGABRT prints every thread's stack (_finish)


def _descendants(pid: int) -> list[int]:
    """``pid``'s children, grandchildren, ... (torchrun starts each worker in a session of its own)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            parent[int(stat.parent.name)] = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        todo += kids
    return found


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and everything it started (found before any dies, so none is re-parented unseen)."""
    pids = [proc.pid] + _descendants(proc.pid) if proc.poll() is None else []
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def _start(cmd: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _finish(procs: list[subprocess.Popen], limit: float, logs: list[Path] = ()) -> list[int]:
    """Wait for every process at most ``limit`` seconds in all; kill every tree on the way out. A run still
    going at the limit is failed with its ``logs``' tails, after SIGABRT made each of its Python processes print
    where every thread was (faulthandler): a rare hang in CI is then diagnosable from the CI log alone."""
    deadline = time.monotonic() + limit
    try:
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for p in procs:
            for pid in ([p.pid] + _descendants(p.pid)) if p.poll() is None else []:
                try:
                    os.kill(pid, signal.SIGABRT)
                except ProcessLookupError:
                    pass
        time.sleep(3)
        tails = "\n----\n".join(Path(log).read_text(errors="replace")[-6000:] for log in logs)
        pytest.fail(f"torchrun still running after {limit:g} s; the stacks at that moment:\n{tails}")
    finally:
        for p in procs:
            _kill_tree(p)
    return [p.returncode for p in procs]


def _assert_close(got: dict, ref: dict) -> None:
    import torch
    assert set(got) == set(ref)
    for n in ref:
        torch.testing.assert_close(got[n], ref[n], rtol=0, atol=1e-6, msg=f"{n} differs")


def _ps_reference(servers: int, workers: int, iterations: int = STEPS):
    from dlsched.hooks.torch_ps import PSConfig, order_from_module, reference_train
    model = str(EXAMPLES / "toy.py") + ":toy_model"
    return reference_train(PSConfig(model=model, order=order_from_module(model), servers=servers, workers=workers,
                                    iterations=iterations, batch=BATCH, lr=LR, timeout=60))


# -- one machine ---------------------------------------------------------------------------------

@pytest.mark.timeout(240)
@pytest.mark.parametrize("script", ["ddp_train", "partial_allreduce_train", "ps_train", "ordered_train"])
def test_each_hook_under_torchrun_equals_the_reference(script, tmp_path):
    """torchrun --standalone --nproc-per-node 2: DDP with the plan's kwargs and the partial all-reduce (full)
    equal single-process SGD on the global batch after 5 steps; the PS hook equals its own reference."""
    import torch
    out = tmp_path / "params.pt"
    extra = {"ddp_train": ["--plan", str(tmp_path / "plan.json")], "partial_allreduce_train": ["--mode", "full"],
             "ps_train": [], "ordered_train": []}[script]
    # a cap far below the model: several buckets, each all-reduced on its own, into views of the gradients
    (tmp_path / "plan.json").write_text(json.dumps({"ddp_kwargs": {"bucket_cap_mb": 0.0002,
                                                                   "gradient_as_bucket_view": True}}))
    proc = _start(_torchrun("--standalone", "--nproc-per-node", "2", str(EXAMPLES / f"{script}.py"),
                            "--out", str(out), *extra), tmp_path / "log", _env())
    rc, = _finish([proc], 180, [tmp_path / "log"])
    log = (tmp_path / "log").read_text(errors="replace")
    assert rc == 0, log[-3000:]
    if script == "ps_train":
        _assert_close(torch.load(f"{out}.rank0"), _ps_reference(1, 1))
    else:
        _assert_close(torch.load(out), _toy().reference(STEPS, 2, BATCH, LR))


def test_a_script_run_without_torchrun_names_the_missing_variable(tmp_path):
    env = {k: v for k, v in _env().items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                         "MASTER_PORT")}
    proc = subprocess.run([sys.executable, str(EXAMPLES / "ddp_train.py")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("dlsched: error: RANK is not set: run this script under torchrun"), proc.stderr


def test_the_world_must_fit_the_ps_configuration():
    from dlsched.hooks.torch_ps import PSConfig, PSConfigError, order_from_module, run_ps_rank
    from dlsched.runtime.torchrun import job_environment
    model = str(EXAMPLES / "toy.py") + ":toy_model"
    cfg = PSConfig(model=model, order=order_from_module(model), servers=1, workers=2, iterations=1, batch=2)
    saved = dict(os.environ)
    os.environ.update(job_environment(0, 2, "tcp://127.0.0.1:1"))
    try:
        with pytest.raises(PSConfigError, match=r"WORLD_SIZE=2 processes, but .* 1 servers \+ 2 workers = 3"):
            run_ps_rank(cfg)
    finally:
        os.environ.clear()
        os.environ.update(saved)


# -- the launcher's variables ----------------------------------------------------------------------

@given(st.integers(1, 64).flatmap(lambda w: st.tuples(st.integers(0, w - 1), st.just(w))),
       st.sampled_from(["127.0.0.1", "10.77.0.1", "node-a.example"]), st.integers(1, 65535))
def test_what_the_launcher_sets_is_what_a_rank_reads(rank_world, host, port):
    from dlsched.runtime.torchrun import job_env, job_environment
    rank, world = rank_world
    env = job_env(job_environment(rank, world, f"tcp://{host}:{port}"))
    assert (env.rank, env.world_size, env.local_rank, env.master_addr, env.master_port) == \
        (rank, world, rank, host, port)


@pytest.mark.parametrize("environ, needle", [
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h"}, "MASTER_PORT is not set"),
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     "RANK must be a whole number"),
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     "must be ranks of a job of WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "70000"},
     "MASTER_PORT must be a TCP port"),
], ids=["no-port", "bad-rank", "rank-out-of-range", "bad-port"])
def test_bad_launcher_variables_are_named(environ, needle):
    from dlsched.runtime.torchrun import TorchrunError, job_env
    with pytest.raises(TorchrunError, match=needle):
        job_env(environ)


# -- the DDP plan ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, needle", [
    (None, "cannot read the DDP plan"),
    ("{not json", "not JSON"),
    ('{"caps": []}', 'no "ddp_kwargs" in it'),
    ('{"ddp_kwargs": [25]}', "ddp_kwargs must be an object"),
    ('{"ddp_kwargs": {"bucket_cap_mb": "25"}}', "bucket_cap_mb must be a finite number of MB above 0"),
    ('{"ddp_kwargs": {"bucket_cap_mb": 0}}', "bucket_cap_mb must be a finite number of MB above 0"),
    ('{"ddp_kwargs": {"bucket_cap_mb": true}}', "bucket_cap_mb must be a finite number of MB above 0"),
    ('{"ddp_kwargs": {"gradient_as_bucket_view": "yes"}}', "gradient_as_bucket_view must be true or false"),
    ('{"ddp_kwargs": {"bucket_cap": 4}}', "ddp_kwargs.bucket_cap is not a keyword dlsched plans"),
], ids=["missing", "not-json", "no-key", "not-object", "cap-string", "cap-zero", "cap-bool", "flag-string",
        "unknown-key"])
def test_a_bad_plan_file_is_one_clear_error(text, needle, tmp_path):
    from dlsched.hooks.ddp_plan import DDPPlanError, ddp_kwargs
    path = tmp_path / "plan.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(DDPPlanError, match=needle) as ei:
        ddp_kwargs(path)
    assert str(ei.value).startswith(str(path)) and ei.value.exit_code == 2


def test_the_plan_keeps_ddps_default_cap_as_none(tmp_path):
    from dlsched.hooks.ddp_plan import ddp_kwargs
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"model": "m", "ddp_kwargs": {"bucket_cap_mb": None, "gradient_as_bucket_view": True}}))
    assert ddp_kwargs(path) == {"bucket_cap_mb": None, "gradient_as_bucket_view": True}


# -- two machines: two network namespaces on a bridge ---------------------------------------------

def _two_machines(tmp_path, script_args: list[str], script: str = "ps_train"):
    """Start ``torchrun --nnodes 2 --nproc-per-node 1`` in each of two namespaces, meeting at a c10d
    rendezvous on host 0's bridge address; returns ``(cluster, procs, logs)``."""
    from dlsched.runtime.netns import Cluster
    cluster = Cluster(2, None)  # unshaped: two machines, not a bandwidth experiment
    cluster.create()
    port, run_id = random.randint(20000, 30000), f"dlsched-test-{os.getpid()}"
    procs, logs = [], []
    for i in range(2):
        # --local-addr: a namespace's hostname resolves to the host, not to its address on the bridge;
        # is_host: node 0 hosts the rendezvous store (c10d cannot tell from the hostname here)
        cmd = cluster.exec_prefix(i) + _torchrun(
            "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{cluster.address(0)}:{port}", "--rdzv-id", run_id,
            "--rdzv-conf", f"is_host={int(i == 0)},join_timeout=60", "--local-addr", cluster.address(i),
            "--max-restarts", "0", str(EXAMPLES / f"{script}.py"), *script_args)
        logs.append(tmp_path / f"machine{i}.log")
        procs.append(_start(cmd, logs[-1], _env(cluster.ifname(i))))
    return cluster, procs, logs


needs_netns = pytest.mark.skipif(not __import__("dlsched.runtime.netns", fromlist=["x"]).available(),
                                 reason="needs root, ip and tc (network namespaces)")


@needs_netns
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", ["ps_train", "ordered_train"])
def test_each_hook_on_two_machines_runs_to_completion(script, tmp_path):
    import torch
    out = tmp_path / "params"
    cluster, procs, logs = _two_machines(tmp_path, ["--out", str(out)], script)
    try:
        codes = _finish(procs, 240, logs)
    finally:
        cluster.destroy()
    text = [log.read_text(errors="replace") for log in logs]
    assert codes == [0, 0], "\n----\n".join(t[-3000:] for t in text)
    if script == "ps_train":  # the rendezvous decides which machine gets rank 0, the server
        _assert_close(torch.load(f"{out}.rank0"), _ps_reference(1, 1))
    else:
        _assert_close(torch.load(out), _toy().reference(STEPS, 2, BATCH, LR))


@needs_netns
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script, dead", [("ps_train", 1), ("ps_train", 0), ("ordered_train", 1)],
                         ids=["ps-other-machine-dies", "ps-rendezvous-host-dies", "ordered-other-machine-dies"])
def test_killing_one_machine_ends_the_other_with_the_hooks_error(script, dead, tmp_path):
    """SIGKILL one machine's torchrun and its worker mid-training: the other machine's rank fails its next
    transfer, prints ``dlsched: error: ...`` and exits 2 (torchrun's summary: ``exitcode  : 2``; torchrun
    exits 1), within the hook's timeout. Also when the dead machine hosted the rendezvous store."""
    cluster, procs, logs = _two_machines(tmp_path, ["--iterations", "100000", "--timeout", str(TIMEOUT)], script)
    try:
        deadline = time.monotonic() + 120
        # the ordered all-reduce makes its own group after joining: killed before that, the survivor fails making
        # it (exit 2 too, a different message); wait until both train
        ready = "training" if script == "ordered_train" else "joining"
        while time.monotonic() < deadline and not all(ready in log.read_text(errors="replace") for log in logs):
            assert all(p.poll() is None for p in procs), [log.read_text(errors="replace")[-2000:] for log in logs]
            time.sleep(0.2)
        time.sleep(3)  # joined and training
        assert all(p.poll() is None for p in procs), [log.read_text(errors="replace")[-2000:] for log in logs]
        _kill_tree(procs[dead])
        killed = time.monotonic()
        codes = _finish([procs[1 - dead]], 2 * TIMEOUT + 30, [logs[1 - dead]])
        took = time.monotonic() - killed
    finally:
        for p in procs:
            _kill_tree(p)
        cluster.destroy()
    text = logs[1 - dead].read_text(errors="replace")
    shown = text[:2000] + "\n…\n" + text[-2000:]  # the worker's lines lead; torchrun's stack traces end it
    assert codes == [1], shown  # torchrun's own code for a failed worker
    err = [ln for ln in text.splitlines() if ln.startswith("dlsched: error: ")]
    assert err and ("a peer process probably died" in err[0] or "timed out" in err[0]), shown
    # the worker's exit 2 as torchrun reports it: its summary, or (when the dead machine hosted the rendezvous
    # store, and the agent fails shutting the rendezvous down before the summary) its "failed (exitcode: 2)" line;
    # or none: the survivor's agent can fail on the dead store before it reaps its worker (1 run in 5 under load
    # here), and then the error line, which only exit_on_error prints before its os._exit(2), is all there is
    agent_lost_store = dead == 0 and "RendezvousConnectionError" in text
    assert re.search(r"exitcode\s*:\s*2\b", text) or agent_lost_store, shown
    assert took < 2 * TIMEOUT + 30
    (tmp_path.parent / f"kill-test-{script}-survivor-{dead}.log").write_text(f"ended {took:.1f} s after the kill\n{text}")


# -- the FSDP plan -----------------------------------------------------------------------------------

def _toy_plan(path, **change):
    from dlsched.formats.fsdp_plan_file import FsdpPlan, write_fsdp_plan
    from dlsched.hooks.fsdp import module_fingerprint
    plan = FsdpPlan("toy", module_fingerprint(_toy().toy_model()[0]), 2, [("0", True), ("2", False)],
                    {"0": ["2"]}, {"2": ["0"]}, True)
    for k, v in change.items():
        setattr(plan, k, v)
    write_fsdp_plan(plan, path)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("with_plan", [True, False], ids=["plan", "fsdp-default"])
def test_fsdp_with_and_without_a_plan_equals_the_reference(with_plan, tmp_path):
    """torchrun --standalone --nproc-per-node 2: fully_shard as the plan says (two units, one kept unsharded,
    prefetch both ways, async all-gathers) and FSDP2's default both equal single-process SGD after 5 steps."""
    import torch
    out = tmp_path / "params.pt"
    _toy_plan(tmp_path / "plan.json")
    extra = ["--plan", str(tmp_path / "plan.json")] if with_plan else []
    proc = _start(_torchrun("--standalone", "--nproc-per-node", "2", str(EXAMPLES / "fsdp_train.py"),
                            "--out", str(out), *extra), tmp_path / "log", _env())
    rc, = _finish([proc], 180, [tmp_path / "log"])
    assert rc == 0, (tmp_path / "log").read_text(errors="replace")[-3000:]
    _assert_close(torch.load(out), _toy().reference(STEPS, 2, BATCH, LR))


@pytest.mark.parametrize("change, needle", [
    ({"fingerprint": "0123456789abcdef"}, "was made for model 'toy' (parameters 0123456789abcdef), but this "
                                          "model's parameters are"),
    ({"units": [("0", True), ("3", True)]}, "names module the model does not have: '3'"),
    ({"forward_prefetch": {"0": ["1"]}}, "which the plan does not make units"),
], ids=["another-model", "no-such-module", "not-a-unit"])
def test_a_plan_that_does_not_fit_is_refused_before_sharding(change, needle, tmp_path):
    from dlsched.hooks.fsdp import FsdpPlanError, apply_plan
    _toy_plan(tmp_path / "plan.json", **change)
    model = _toy().toy_model()[0]
    with pytest.raises(FsdpPlanError) as e:
        apply_plan(model, tmp_path / "plan.json")
    assert needle in str(e.value)
    assert not any(type(m).__name__.startswith("FSDP") for m in model.modules())  # nothing was sharded


@pytest.mark.timeout(240)
def test_another_models_plan_under_torchrun_ends_every_rank_with_exit_2(tmp_path):
    """The user's script under torchrun, given a plan made for another model: each rank prints one
    ``dlsched: error:`` paragraph and exits 2 (torchrun reports it and exits 1), and nothing hangs."""
    _toy_plan(tmp_path / "plan.json", fingerprint="0123456789abcdef")
    proc = _start(_torchrun("--standalone", "--nproc-per-node", "2", str(EXAMPLES / "fsdp_train.py"),
                            "--plan", str(tmp_path / "plan.json")), tmp_path / "log", _env())
    rc, = _finish([proc], 180, [tmp_path / "log"])
    text = (tmp_path / "log").read_text(errors="replace")
    assert rc == 1, text[-3000:]
    errors = [ln for ln in text.splitlines() if ln.startswith("dlsched: error: ")]
    assert len(errors) == 2 and all("was made for model 'toy' (parameters 0123456789abcdef)" in e
                                    for e in errors), text[-3000:]
    assert re.search(r"exitcode\s*:\s*2\b", text), text[-3000:]
    assert "Traceback" not in text.split("failed (exitcode")[0], text[-3000:]  # the ranks' own output; the
    # traceback after it is torchrun's agent reporting the failed workers, as it does for any worker's exit
