"""PyTorch parameter-server hook (DESIGN §6): same result as plain SGD, enforced
transfer order, clean failure, and the CUDA path. Each test runs a real gloo job
of several processes on localhost."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(300)

SMALL = "examples/torch_models.py:small_cnn"
WIDE = "tests/test_torch_hook.py:wide_mlp"


def wide_mlp(layers: int = 5, width: int = 2048):
    """Bias-free layers of 16 MB each: every transfer takes long enough on loopback
    that arrival times are clearly separated."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width, bias=False), nn.ReLU()]
    return nn.Sequential(*mods), (torch.randn(2, width),)


def one_big_tensor(width: int = 4096):
    """A 64 MB weight and six small ones: the big transfer lasts long on loopback, the small ones not."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    mods = [nn.Linear(width, width, bias=False), nn.Linear(width, 8)]
    for _ in range(5):
        mods += [nn.ReLU(), nn.Linear(8, 8)]
    return nn.Sequential(*mods), (torch.randn(2, width),)


def _cfg(model, order=None, **kw):
    from dlsched.hooks.torch_ps import PSConfig, order_from_module
    kw.setdefault("timeout", 60)
    return PSConfig(model=model, order=order or order_from_module(model), **kw)


def test_ps_training_equals_single_process():
    import torch
    from dlsched.hooks.torch_ps import launch_local, reference_train
    from dlsched.formats.priority_file import PriorityFile, Transfer
    names = [n for n, _ in __import__("dlsched.hooks.torch_ps", fromlist=["x"]).load_factory(SMALL)()[0]
             .named_parameters()]
    # a priority file that interleaves the two servers and is not declaration order
    pf = PriorityFile("test", [Transfer(n, i, 0, i % 2) for i, n in enumerate(reversed(names))])
    from dlsched.hooks.torch_ps import config_from_priority_file
    cfg = config_from_priority_file(SMALL, pf, servers=2, workers=2, iterations=5, batch=4, lr=0.1,
                                    momentum=0.9, window=2, timeout=60)
    run = launch_local(cfg)
    ref = reference_train(cfg)
    init = dict(__import__("dlsched.hooks.torch_ps", fromlist=["x"]).load_factory(SMALL)()[0].named_parameters())
    assert set(run.params) == set(ref)
    for n in ref:
        torch.testing.assert_close(run.params[n], ref[n], rtol=1e-4, atol=1e-5)
        assert not torch.allclose(ref[n], init[n].detach()), f"{n} did not train"
    assert sorted(run.timeline.workers) == [0, 1] and run.timeline.iterations == list(range(5))


def _inversions(observed, expected):
    """Pairs that ``observed`` puts the other way round from ``expected`` (Kendall-tau distance)."""
    pos = {n: i for i, n in enumerate(observed)}
    return sum(pos[a] > pos[b] for i, a in enumerate(expected) for b in expected[i + 1:])


def _assert_runs_in_order(records, expected_of, server=None):
    """Every record but at most one arrives in exactly its expected order.

    An arrival is stamped by the thread that waited for it, after the receive
    completed; on a loaded 2-core machine (CI runs two pytest workers) the waiter
    threads that became runnable in one spell are scheduled in any order, tens of
    ms late: one CI run stamped 6 after 4 and 8, another 8 before 2, 4 and 6
    (3 pairs of 10). So one record per run may be off, by any amount. The test's
    power is in the rest: a server that ignored the order would put a record of
    5 in its expected order 1 time in 120, so most of a run's records would be off.
    """
    seen = {id(r): r.arrival_order(server) for r in records}
    off = [r for r in records if seen[id(r)] != expected_of(r)]
    assert len(records) >= 4 and len(off) <= 1, \
        [(r.worker, r.iteration, seen[id(r)], _inversions(seen[id(r)], expected_of(r))) for r in off]


@pytest.mark.slow
def test_transfers_follow_the_priority_order():
    from dlsched.hooks.torch_ps import launch_local, order_from_module
    names = order_from_module(WIDE)
    for order in (names, names[::-1]):
        run = launch_local(_cfg(WIDE, order, servers=1, workers=2, iterations=4, batch=2, mode="inference"))
        _assert_runs_in_order(run.timeline.records, lambda r: order)
        if order == names:  # the first layer's weights come first: compute overlaps the rest
            assert all(rec.compute_start < rec.last_arrival for rec in run.timeline.records)
    # the unordered baseline really is unordered, and each arrival follows its own random order
    run = launch_local(_cfg(WIDE, names, servers=1, workers=2, iterations=4, batch=2, mode="inference",
                            unordered=True))
    assert len({tuple(r.arrival_order()) for r in run.timeline.records}) > 1
    _assert_runs_in_order(run.timeline.records, lambda r: r.sent_order[0])


def test_server_sends_to_each_worker_on_its_own():
    """One worker's large transfer does not hold up the server's sends to another worker (one channel per
    worker-server pair, as the simulator's fair links assume). Under unordered sends the workers' orders
    differ. With a window of one, the server posts worker a's next tensor after the 64 MB one at position
    p has gone; meanwhile it has posted worker b's tensors beyond p + 1. A server that posted both workers'
    sends in one loop over positions could not (program order: b's post p + 2 came after a's post p + 1)."""
    from dlsched.hooks.torch_ps import launch_local, order_from_module
    model = "tests/test_torch_hook.py:one_big_tensor"
    names = order_from_module(model)
    big = names[0]
    run = launch_local(_cfg(model, names, servers=1, workers=2, iterations=8, batch=2, mode="inference",
                            unordered=True))
    by = {}
    for r in run.timeline.records:
        by.setdefault(r.iteration, {})[r.worker] = r
    ahead = []  # per (iteration, worker a with the big one not last): b's posts beyond p + 1 before a's p + 1
    for recs in by.values():
        for a in recs.values():
            order = a.sent_order[0]
            p = order.index(big)
            if p + 1 < len(order):
                for b in recs.values():
                    if b is not a:
                        later = b.sent_order[0][p + 2:]
                        ahead.append(sum(b.sent[n] < a.sent[order[p + 1]] for n in later))
    assert ahead and max(ahead) >= 3, ahead


def test_rotation_interleaves_orders_per_iteration():
    from dlsched.hooks.torch_ps import launch_local, order_from_module
    names = order_from_module(WIDE)
    rotation = [names, None, names[::-1]]
    cfg = _cfg(WIDE, names, servers=1, workers=2, iterations=6, batch=2, mode="inference", rotation=rotation)
    run = launch_local(cfg)
    assert [r.sent_order[0] for r in run.timeline.records if r.iteration % 3 != 1] \
        == [rotation[r.iteration % 3] for r in run.timeline.records if r.iteration % 3 != 1]
    unordered = {tuple(r.sent_order[0]) for r in run.timeline.records if r.iteration % 3 == 1}
    assert len(unordered) > 1 and all(sorted(o) == sorted(names) for o in unordered)
    _assert_runs_in_order(run.timeline.records, lambda r: r.sent_order[0])
    # validate predicts the unordered iterations with the very permutations the servers send, known ahead
    from dlsched.analyses.validate import observed_priorities
    from dlsched.jobs.validate_run import sent_priorities
    ahead = sent_priorities(cfg, [1, 4])
    seen = {(r.iteration, r.worker): observed_priorities(r) for r in run.timeline.records if r.iteration % 3 == 1}
    assert [[seen[(it, w)] for w in range(2)] for it in (1, 4)] == ahead


def test_inversions_count_pairs_out_of_order():
    assert _inversions(list("abcde"), list("abcde")) == 0
    assert _inversions(list("bacde"), list("abcde")) == 1
    assert _inversions(list("edcba"), list("abcde")) == 10


def test_two_servers_each_enforce_their_order():
    from dlsched.hooks.torch_ps import launch_local, order_from_module
    names = order_from_module(WIDE)[::-1]
    cfg = _cfg(WIDE, names, servers=2, workers=2, iterations=2, batch=2, mode="training")
    run = launch_local(cfg)
    for s in (0, 1):
        _assert_runs_in_order(run.timeline.records, lambda r: [n for n in names if cfg.server_of(n) == s], s)


def test_dead_worker_fails_cleanly():
    from dlsched.hooks.torch_ps import PSTrainingError, launch_local
    cfg = _cfg(SMALL, servers=2, workers=2, iterations=5, batch=4, timeout=20, fail_worker=1, fail_iteration=2)
    t0 = time.monotonic()
    with pytest.raises(PSTrainingError) as ei:
        launch_local(cfg, timeout=60)
    assert time.monotonic() - t0 < 60
    codes = ei.value.returncodes
    assert codes[3] == 17  # the worker that died
    assert codes[0] == codes[1] == codes[2] == 2, codes  # everyone else: clean error, no kill needed
    for err in ei.value.stderr[:3]:
        assert "dlsched: error:" in err and "Traceback" not in err, err
    assert "peer process probably died" in str(ei.value)


def test_killed_worker_fails_cleanly():
    from dlsched.hooks.torch_ps import PSTrainingError, launch_local
    cfg = _cfg(WIDE, servers=1, workers=2, iterations=200, batch=2, timeout=20)

    def kill_later(procs):
        time.sleep(8)
        os.kill(procs[2].pid, signal.SIGKILL)
    with pytest.raises(PSTrainingError) as ei:
        launch_local(cfg, timeout=60, on_start=kill_later)
    codes = ei.value.returncodes
    assert codes[2] == -signal.SIGKILL and codes[0] == codes[1] == 2, codes


_POST_TO_A_DEAD_PEER = r"""
import os, sys, time, torch, torch.distributed as dist
from dlsched.runtime.ps_failures import PSTrainingError, post_transfer
rank = int(sys.argv[1])
dist.init_process_group("gloo", rank=rank, world_size=2)
t = torch.ones(8)
if rank == 1:
    dist.recv(t, 0)
    os._exit(0)
dist.send(t, 1)
time.sleep(2)  # rank 1 is gone and its connection closed
try:
    post_transfer(lambda: dist.isend(t, 1), "the test send")
except PSTrainingError as e:
    print("PSTrainingError:", e)
os._exit(0)
"""


def test_a_post_to_a_dead_peer_is_a_training_error():
    """gloo's isend raises at the post, not at the wait, once a dead peer closed the connection: raised from a
    gradient hook inside ``backward()`` it ended a worker with exit 1 and a traceback (CI, a killed rendezvous
    host). Posting through ``post_transfer`` makes it the one-line PSTrainingError."""
    from dlsched.runtime.launcher import free_port
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = [subprocess.Popen([sys.executable, "-c", _POST_TO_A_DEAD_PEER, str(r)], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    out = [p.communicate(timeout=120) for p in procs]
    assert "PSTrainingError: the test send failed at its post (" in out[0][0], out[0]
    assert "a peer process probably died" in out[0][0], out[0]


def test_stalled_worker_times_out_cleanly():
    from dlsched.hooks.torch_ps import PSTrainingError, launch_local
    cfg = _cfg(SMALL, servers=1, workers=2, iterations=4, batch=4, timeout=8, fail_worker=1, fail_iteration=1,
               fail_how="stall")
    t0 = time.monotonic()
    with pytest.raises(PSTrainingError) as ei:
        launch_local(cfg, timeout=45)
    codes = ei.value.returncodes
    assert codes[0] == 2 and codes[1] == 2, codes  # server and healthy worker: clean errors
    assert codes[2] == -signal.SIGKILL  # the stalled one is killed by the launcher
    assert "timed out after 8 s" in ei.value.stderr[0], ei.value.stderr[0]
    assert time.monotonic() - t0 < 60


def test_bad_order_is_a_clean_error():
    from dlsched.errors import PriorityFileError
    from dlsched.hooks.torch_ps import build_model
    with pytest.raises(PriorityFileError, match="missing parameters"):
        build_model(_cfg(SMALL, ["conv1.weight"]))


def test_example_launcher_runs():
    proc = subprocess.run([sys.executable, "examples/ps_train_torch.py", "--iterations", "2"], cwd=REPO,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "arrival order" in proc.stdout


def test_cuda_path():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the CUDA path (gloo with pinned CPU staging) needs one")
    from dlsched.hooks.torch_ps import launch_local, reference_train
    cfg = _cfg(SMALL, servers=2, workers=2, iterations=3, batch=4, device="cuda")
    run = launch_local(cfg)
    ref = reference_train(cfg)
    for n in ref:
        torch.testing.assert_close(run.params[n], ref[n], rtol=1e-3, atol=1e-4)
