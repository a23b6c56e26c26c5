"""FSDP2's default against a plan, in alternating blocks of consecutive steps (issue 30 item 4).

``dlsched validate --dp fsdp``'s real run. Every rank builds the model once
and makes two deep copies of it FSDP2 models with
:func:`dlsched.hooks.fsdp.apply_plan`: **default**, the plan's units with
FSDP2's defaults (every unit resharded, no explicit prefetch, blocking
all-gathers), and **plan**, the plan itself. Before the rounds it times
gloo's all-gather and reduce-scatter at a range of sizes (the median of a
few calls each) on the same hosts. A round runs two unscored
**calibration** steps: forward and backward of a third, plain copy of the
module, no collective, then the optimizer (the compute the ranks really
spend beside each other); and the same of a fourth copy made an FSDP2 model
with the plan's units on a **one-process group** of its own, where FSDP2
runs every hook and copy but no collective (what FSDP2's own bookkeeping
costs the thread), whose ranks meet in a barrier where FSDP2's collectives
make them meet (:func:`meet_where_fsdp_meets`). Then a block of ``block`` consecutive steps of each
FSDP2 model, in an order that alternates each round. A block's step time is
its steady-state period, from the start of its second step to the start of
its last; the cluster's is the slowest rank's.

**Peak memory per process, measured**: after the rounds, ``PEAK_STEPS``
steps of each model under ``torch.profiler`` with ``profile_memory``. A
step's peak is the most it held at once beyond what it began with
(:func:`dlsched.profiling.memory_peak.allocated_during`, which says why not
the profiler's own running total), plus what the process held then (its
parameter shards and optimizer state; the loop's ``zero_grad`` has freed the
gradients); the run's is its largest step's. Both models train on the same
batches from the same parameters, so afterwards they must hold the same
parameters (reported).
"""
from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from dlsched.errors import DlschedError
from dlsched.profiling.memory_peak import allocated_during
from dlsched.runtime import launcher
from dlsched.runtime.ps_failures import transfer_failure

from .ddp_caps_run import join_with_model

#: the module every rank runs (``python -m ENTRY``)
ENTRY = "dlsched.jobs.fsdp_run"
MODES = ("default", "plan")
PEAK_STEPS = 3  # profiled steps per model whose largest peak is the run's (module docstring)
#: calls per size when timing a collective
CALLS = 5


class FsdpJobFailed(DlschedError):
    """A rank of the FSDP2 job failed."""


@dataclass
class FsdpRun:
    """Per mode each measured block's period (s per step, the slowest rank's) and peak memory (bytes, the
    largest rank's); the calibration steps' forward + backward and optimizer, plain and on the one-process
    group (s, the slowest rank's, per round: ``(rounds, 4)``); the timed
    collectives (sizes in bytes moved, seconds, medians over ranks); the largest parameter difference."""

    periods: dict
    peak_bytes: dict
    calibration: np.ndarray
    sizes: list
    all_gather_s: list
    reduce_scatter_s: list
    max_param_diff: float
    block: int


def _time_collectives(sizes, world: int):
    """Median seconds of ``CALLS`` all-gathers and reduce-scatters moving ``n`` bytes in all, for each size."""
    import torch
    import torch.distributed as dist
    ag, rs = [], []
    for n in sizes:
        part = max(1, n // (4 * world))
        small, big = torch.ones(part), torch.ones(part * world)
        for fn, out in ((lambda: dist.all_gather_into_tensor(big, small), ag),
                        (lambda: dist.reduce_scatter_tensor(small, big), rs)):
            fn()  # warm
            secs = []
            for _ in range(CALLS):
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                secs.append(time.perf_counter() - t0)
            out.append(float(np.median(secs)))
    return ag, rs


def _own_mesh(rank: int, world: int):
    """A device mesh of this process alone (every process creates every one-process group, as
    ``new_group`` requires)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    mine = None
    for r in range(world):
        group = dist.new_group([r])
        if r == rank:
            mine = group
    return DeviceMesh.from_group(mine, "cpu")


def meet_where_fsdp_meets(model, units) -> int:
    """Make the ranks meet in a world barrier before each of ``units``' (and the root's) forward and
    backward, where FSDP2's all-gathers meet them; returns the number of meeting points per step.

    A rank that reaches a collective first waits for the others, so a step
    that meets ``k`` times costs the sum of ``k`` slowest segments, not the
    slowest sum. On 2 ranks on 2 cores (transformer, loopback) the
    one-process step took 0.311–0.335 s alone and 0.335–0.356 s meeting at
    10 points, and FSDP2's default step spent 0.023 s a step waiting inside
    its collectives for the other rank (each call's time less the faster
    rank's); collectives timed back to back after a barrier do not hold it.
    """
    import torch.distributed as dist
    modules = dict(model.named_modules())
    points = 0
    for name in [*units, ""]:
        modules[name].register_forward_pre_hook(lambda *_: dist.barrier())
        modules[name].register_full_backward_pre_hook(lambda *_: dist.barrier())
        points += 2
    return points


def _peak_of_step(model, opt, step) -> float:
    """Bytes held when a step begins (shards, optimizer state) plus the most it allocated during it."""
    from torch.profiler import ProfilerActivity, profile
    held = sum(p.to_local().numel() * p.element_size() if hasattr(p, "to_local") else p.numel() * p.element_size()
               for p in model.parameters())
    held += sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
                if hasattr(t, "numel"))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    return float(held + allocated_during(events))


def run_rank(config: dict, rank: int, init_method: str) -> dict:
    """One rank: the timed collectives, then rounds of a calibration step and a block of each model."""
    import torch
    import torch.distributed as dist

    from dlsched.factory import training_loss
    from dlsched.formats.fsdp_plan_file import parse_fsdp_plan
    from dlsched.hooks.fsdp import apply_plan
    module, inputs = join_with_model(config)
    lr, world = 1e-3, dist.get_world_size()
    plan = parse_fsdp_plan(config["plan"], "the plan")
    default = copy.deepcopy(plan)
    default.units = [(m, True) for m, _ in plan.units]
    default.forward_prefetch, default.backward_prefetch, default.unshard_async = {}, {}, False
    try:
        ag, rs = _time_collectives(config["sizes"], world)
        models = {"default": apply_plan(copy.deepcopy(module), default),
                  "plan": apply_plan(copy.deepcopy(module), plan)}
        opts = {m: torch.optim.SGD(models[m].parameters(), lr=lr) for m in MODES}
        plain = copy.deepcopy(module)
        popt = torch.optim.SGD(plain.parameters(), lr=lr)
        solo = apply_plan(copy.deepcopy(module), default, mesh=_own_mesh(rank, world))
        meet_where_fsdp_meets(solo, [m for m, _ in default.units])
        sopt = torch.optim.SGD(solo.parameters(), lr=lr)

        def step(m):
            training_loss(models[m](*inputs)).backward()
            opts[m].step()
            opts[m].zero_grad()

        calib, starts = [], {m: [] for m in MODES}
        for r in range(config["warmup"] + config["rounds"]):
            dist.barrier()
            t0 = time.perf_counter()
            training_loss(plain(*inputs)).backward()
            t1 = time.perf_counter()
            popt.step()
            popt.zero_grad()
            t2 = time.perf_counter()
            training_loss(solo(*inputs)).backward()
            t3 = time.perf_counter()
            sopt.step()
            sopt.zero_grad()
            t4 = time.perf_counter()
            for m in (MODES if r % 2 == 0 else MODES[::-1]):
                dist.barrier()
                block = []
                for _ in range(config["block"]):
                    block.append(time.perf_counter())
                    step(m)
                block.append(time.perf_counter())
                if r >= config["warmup"]:
                    starts[m].append(block)
            if r >= config["warmup"]:
                calib.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3))
        peaks = {m: 0.0 for m in MODES}
        for _ in range(PEAK_STEPS):
            for m in MODES:
                dist.barrier()
                peaks[m] = max(peaks[m], _peak_of_step(models[m], opts[m], lambda m=m: step(m)))
        full = {m: [p.full_tensor().detach() for p in models[m].parameters()] for m in MODES}
        dist.barrier()
    except DlschedError:
        raise
    except Exception as e:
        raise transfer_failure(f"rank {rank}: an FSDP2 step or collective failed", e) from None
    diff = max(float((a - b).abs().max()) for a, b in zip(full["default"], full["plan"]))
    return {"rank": rank, "starts": starts, "calibration": calib, "peaks": peaks, "ag": ag, "rs": rs,
            "max_param_diff": diff}


def run_fsdp(model: str, *, workers: int, batch: int, threads: int, plan: dict, sizes, rounds: int, warmup: int,
             block: int, timeout: float, hosts=None) -> FsdpRun:
    """Run the job on ``hosts`` (``None``: localhost) and gather what it measured.

    Raises
    ------
    FsdpJobFailed
        A rank failed; the message quotes its own error line.
    """
    if block < 3:
        raise DlschedError(f"a block needs at least 3 steps to have a steady-state period, got {block}")
    config = {"model": model, "workers": workers, "batch": batch, "threads": threads, "plan": plan,
              "sizes": list(sizes), "rounds": rounds, "warmup": warmup, "block": block, "timeout": timeout}
    kw = hosts.launch_args() if hosts is not None else {}
    job = launcher.launch_ranks(ENTRY, config, workers, job_timeout=timeout, grace=min(timeout, 30.0),
                                prefix="dlsched-fsdp-", kind="FSDP2", failed=FsdpJobFailed, **kw)
    res = job.results
    periods = {}
    for m in MODES:
        per_rank = np.array([[np.diff(b[1:-1]).mean() for b in r["starts"][m]] for r in res])
        periods[m] = per_rank.max(axis=0).tolist()
    calib = np.array([r["calibration"] for r in res]).max(axis=0)  # (rounds, 4)
    return FsdpRun(periods, {m: max(r["peaks"][m] for r in res) for m in MODES}, calib, list(sizes),
                   np.median([r["ag"] for r in res], axis=0).tolist(),
                   np.median([r["rs"] for r in res], axis=0).tolist(),
                   max(r["max_param_diff"] for r in res), block)


def main(argv=None) -> None:
    launcher.rank_main(argv, "one rank of dlsched's FSDP2 default-against-plan job", run_rank)


if __name__ == "__main__":
    main()
