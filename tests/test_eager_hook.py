"""The eager-SGD hook with real processes (issue 12, acceptance 6 and 7): 4 gloo processes, a few steps.

- zero imbalance: the partial-collective machinery activated by the last arrival
  (``full``) gives DDP's parameters after 5 steps to 1e-6;
- solo with one injected delay, ``model_sync_every`` and the limiter
  (``sync_every``): the replicas agree after every synchronisation, no gradient
  is lost (every computed gradient is in exactly one round's sum or still
  queued at the end, counted and summed), the limiter's rounds are synchronous
  and bound the lag, and the model's age never exceeds the lag;
- majority through the CLI: the initiator is the seeded draw on every process,
  and it is always active;
- a SIGKILLed or a stalled (SIGSTOP) rank ends every other rank with exit code 2.

The timing figures live in ``benchmarks/bench_eager_real.py``.
"""
from __future__ import annotations

import json
import time

import pytest
import torch

from tests.conftest import assert_clean_error, run_cli

pytestmark = pytest.mark.timeout(120)

SMALL = dict(dim=64, batch=16, shard_batches=4, timeout=20)


def _cfg(collective, iterations, step_times=None, **kw):
    from dlsched.jobs.eager_sgd import EagerConfig
    return EagerConfig(collective=collective, processes=4, iterations=iterations,
                       step_times=step_times or [[0.0] * 4] * iterations, **{**SMALL, **kw})


def test_full_collective_gives_ddp_parameters():
    from dlsched.jobs.eager_sgd import train_allreduce
    ddp, full = (train_allreduce(_cfg(c, 5)) for c in ("ddp", "full"))
    assert full.mean_nap == 4 and full.queued_at_end == 0 and full.initiators_agree and full.initiators_active
    assert full.max_version_staleness == 0 and full.activation_s >= 0
    assert 0 < ddp.last_arrival_latency_s <= ddp.mean_latency_s  # the last arrival waits for nobody
    want = ddp.extra["results"][0]["params"]
    assert want.abs().max() > 1e-3  # it trained
    for r in full.extra["results"] + ddp.extra["results"]:
        torch.testing.assert_close(r["params"], want, rtol=0, atol=1e-6)


def test_solo_loses_no_gradient_and_syncs_replicas():
    from dlsched.jobs.eager_sgd import train_allreduce
    steps = [[0.01] * 4 for _ in range(12)]
    steps[2][1] = 0.25  # rank 1 falls behind at step 2: its gradients go stale, its replica drifts
    run = train_allreduce(_cfg("solo", 12, steps, model_sync_every=4, sync_every=4))
    res = run.extra["results"]
    assert run.initiators_agree and run.initiators_active
    assert run.mean_staleness > 0 and run.max_staleness >= 1  # the delay made gradients miss their round
    # the model's age never exceeds the lag; the limiter's rounds (3, 7, 11) are synchronous and bound the lag
    assert 0 < run.mean_version_staleness <= run.mean_staleness and run.max_version_staleness <= run.max_staleness
    assert run.max_staleness <= 3 and [r["synchronous"] for r in res[0]["records"]] == [r % 4 == 3 for r in range(12)]
    assert all(run.nap[r] == 4 for r in (3, 7, 11))
    # none lost: Σ rounds + Σ still queued = every gradient computed, by count and by value
    recs = res[0]["records"]
    assert sum(r["gradients"] for r in recs) + sum(r["n_queued"] for r in res) == 4 * 12
    computed = sum(r["grad_sum"] for r in res)
    accounted = res[0]["reduced_sum"] + sum(r["queued"] for r in res)
    torch.testing.assert_close(accounted, computed, rtol=1e-5, atol=1e-5)
    for r in res[1:]:
        torch.testing.assert_close(r["reduced_sum"], res[0]["reduced_sum"], rtol=0, atol=0)
    # replicas agree after every synchronisation
    assert all(len(r["syncs"]) == 3 for r in res)
    for k in range(3):
        for r in res[1:]:
            torch.testing.assert_close(r["syncs"][k], res[0]["syncs"][k], rtol=0, atol=1e-6)


def test_majority_through_the_cli():
    from dlsched.hooks.partial_allreduce import majority_initiator
    proc = run_cli("train-allreduce", "--collective", "majority", "--processes", "4", "--iterations", "10",
                   "--dim", "64", "--batch", "16", "--step-pad", "10ms", "--imbalance", "random:k=1:delay=40ms",
                   "--seed", "3", "--json", timeout=110)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    m = out["collectives"]["majority"]
    assert out["processes"] == 4 and out["imbalance"] == "random:k=1:delay=40ms"
    assert m["initiators"] == [majority_initiator(3, r, 4) for r in range(10)]
    assert m["initiators_agree"] and m["initiators_active"]  # every vote names it; it is always fresh
    assert all(1 <= n <= 4 for n in m["nap"]) and 1 <= m["mean_nap"] <= 4
    assert m["steps_per_s"] > 0 and m["final_loss"] > 0


@pytest.mark.parametrize("args,needle", [(["--collective", "ddp,gossip"], "collectives must be distinct names"),
                                         (["--imbalance", "skew:cubic:1ms:2ms"], "only a linear skew"),
                                         (["--imbalance", "random:k=9:delay=1ms"], "asks for k=9")],
                         ids=["collective", "imbalance", "k-above-processes"])
def test_cli_refuses_bad_input_before_starting(args, needle):
    t0 = time.monotonic()
    assert_clean_error(run_cli("train-allreduce", "--processes", "4", *args, timeout=60), needle)
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("how", ["kill", "stall"])
def test_dead_or_stalled_rank_ends_every_other(how):
    from dlsched.jobs.eager_sgd import EagerTrainingError, train_allreduce
    timeout = 5
    cfg = _cfg("solo", 200, [[0.01] * 4] * 200, fail_rank=2, fail_step=3, fail_how=how, timeout=timeout)
    t0 = time.monotonic()
    with pytest.raises(EagerTrainingError) as ei:
        train_allreduce(cfg)
    codes = ei.value.returncodes
    assert codes[2] < 0 and [c for r, c in enumerate(codes) if r != 2] == [2, 2, 2], (codes, str(ei.value))
    assert "rank 0 exited with 2" in str(ei.value) and "\n" not in str(ei.value)
    # the survivors ended by themselves, within the grace the launcher gives them after the first failure
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("kw,needle", [
    ({"collective": "gossip"}, "collective must be one of"),
    ({"processes": 1}, "processes must be at least 2"),
    ({"processes": 2.5}, "processes must be a whole number"),
    ({"iterations": 0}, "iterations must be at least 1"),
    ({"lr": float("nan")}, "lr must be a finite number"),
    ({"timeout": 0}, "timeout must be a finite number"),
    ({"dim": 10**9}, "must stay within"),
    ({"step_times": [[0.1] * 3]}, "step_times must have 1 rows of 4"),
    ({"step_times": [[0.1, 0.1, -1, 0.1]]}, "step_times must be finite"),
    ({"step_times": [["x"] * 4]}, "step_times must have 1 rows of 4"),
    ({"step_times": 7}, "step_times must have 1 rows of 4"),
    ({"fail_rank": 4}, "fail_rank must be a rank below"),
], ids=lambda v: ",".join(v) if isinstance(v, dict) else "why")
def test_bad_settings_are_refused(kw, needle):
    from dlsched.jobs.eager_sgd import EagerConfig, EagerConfigError
    args = {"collective": "solo", "processes": 4, "iterations": 1, **kw}
    with pytest.raises(EagerConfigError, match=needle) as ei:
        EagerConfig(**args)
    assert str(ei.value).startswith("invalid eager-SGD configuration: ") and ei.value.exit_code == 2


def test_cli_timeout_bounds_every_wait_in_the_ranks():
    """--timeout reaches the ranks: 1 ms is too short for them even to meet, and they say so (exit 2)."""
    proc = run_cli("train-allreduce", "--processes", "2", "--iterations", "3", "--dim", "8", "--batch", "4",
                   "--collective", "solo", "--timeout", "1ms", timeout=60)
    assert_clean_error(proc, "eager-SGD job failed")
    # which wait comes first is a race: joining the process group, or the start barrier after it
    assert "joining the job failed" in proc.stderr or "timed out after 0.001 s" in proc.stderr, proc.stderr


def test_job_stopped_at_its_limit_says_so():
    """The launcher kills ranks still running at the job's limit, and the error says why (not only the signal)."""
    from dlsched.jobs.eager_sgd import EagerTrainingError, train_allreduce
    cfg = _cfg("solo", 2, [[30.0] * 4] * 2, timeout=60)
    t0 = time.monotonic()
    with pytest.raises(EagerTrainingError, match="ran past its limit of 3 s and was stopped") as ei:
        train_allreduce(cfg, job_timeout=3)
    assert "was killed (signal" in str(ei.value) and ei.value.exit_code == 2
    assert time.monotonic() - t0 < 30
