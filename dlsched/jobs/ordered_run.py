"""Stock DDP against the ordered all-reduce, in alternating blocks of consecutive steps (issue 29 item 4).

The ordered all-reduce gains by overlapping one step's communication with the
next step's forward, so it is measured over consecutive steps: a round runs a
block of ``block`` steps of torch's ``DistributedDataParallel`` (at the cap
``plan-ddp`` recommends) and a block of the same length of
:class:`dlsched.hooks.ordered_allreduce.OrderedAllreduce` (the schedule
``plan-ddp`` found best), in an order that alternates each round so that a
drift of the machine's speed hits both alike. Within a block nothing
separates the steps, as in training; a block starts after a barrier and the
ordered one ends with :meth:`~dlsched.hooks.ordered_allreduce.OrderedAllreduce.wait_all`.
A block's step time is its steady-state period: from the start of its second
step to the start of its last, over the steps between (the first step starts
from a barrier, with nothing of a previous step to overlap). Both replicas
start from the same parameters and train on the same batches, so after the
run they must hold the same parameters (to rounding), which the job reports.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np

from dlsched.errors import DlschedError
from dlsched.runtime import launcher
from dlsched.runtime.ps_failures import transfer_failure

from .ddp_caps_run import join_with_model

#: the module every rank runs (``python -m ENTRY``)
ENTRY = "dlsched.jobs.ordered_run"
MODES = ("ddp", "ordered")


class OrderedJobFailed(DlschedError):
    """A rank of the DDP-against-ordered job failed."""


@dataclass
class OrderedRun:
    """Per mode, each measured block's period (seconds per step, the slowest rank's); the largest difference
    between the two replicas' parameters after the run; the median of the ranks' :func:`piece_gap`."""

    periods: dict
    max_param_diff: float
    block: int
    piece_gap_s: float = 0.0


def piece_gap(records, pieces) -> float | None:
    """The link's idle time per piece that the communication thread causes: from one piece's end to the next
    one's issue (0 when the next was issued first), over the pieces whose gradients were all ready before the
    previous piece ended (so nothing was waited for), the median; ``None`` when no piece qualifies. The hook
    issues a ready piece before it lands the one in flight (:mod:`dlsched.hooks.ordered_allreduce`), so this
    is 0 unless gathering the next piece outlasts the previous one's transfer."""
    names = [{s[0] for s in piece} for piece in pieces]
    gaps = []
    for rec in records:
        for i in range(len(rec.pieces) - 1):
            done, issued = rec.pieces[i][1], rec.pieces[i + 1][0]
            ready = [rec.ready_s.get(n) for n in names[i + 1]]
            if all(t is not None and t <= done for t in ready):
                gaps.append(max(0.0, issued - done))
    return float(np.median(gaps)) if gaps else None


def run_rank(config: dict, rank: int, init_method: str) -> dict:
    """One rank: alternating blocks of DDP and ordered steps; its step start times per block."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dlsched.factory import training_loss
    from dlsched.hooks.ordered_allreduce import OrderedAllreduce
    module, inputs = join_with_model(config)
    timeout, lr = config["timeout"], 1e-3
    ddp = DDP(copy.deepcopy(module), bucket_cap_mb=config["bucket_cap_mb"], gradient_as_bucket_view=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    plain = copy.deepcopy(module)
    oar = OrderedAllreduce(plain, config["pieces"], lambda ps: torch.optim.SGD(ps, lr=lr), timeout=timeout)
    starts = {m: [] for m in MODES}
    try:
        for r in range(config["warmup"] + config["rounds"]):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                dist.barrier()
                block = []
                for _ in range(config["block"]):
                    block.append(time.perf_counter())
                    if mode == "ddp":
                        training_loss(ddp(*inputs)).backward()
                        opt.step()
                        opt.zero_grad(set_to_none=False)
                    else:
                        training_loss(plain(*inputs)).backward()  # the hook updates as pieces land
                block.append(time.perf_counter())
                if mode == "ordered":
                    oar.wait_all()
                if r >= config["warmup"]:
                    starts[mode].append(block)
        oar.wait_all()
        dist.barrier()
    except DlschedError:
        raise
    except Exception as e:
        raise transfer_failure(f"rank {rank}: a collective failed", e) from None
    finally:
        oar.close()
    diff = max(float((a.detach() - b.detach()).abs().max()) for a, b in
               zip(ddp.module.parameters(), plain.parameters()))
    return {"rank": rank, "starts": starts, "max_param_diff": diff, "piece_gap": piece_gap(oar.records,
                                                                                            config["pieces"])}


def run_ordered(model: str, *, workers: int, batch: int, threads: int, bucket_cap_mb: float | None, pieces,
                rounds: int, warmup: int, block: int, timeout: float, hosts=None) -> OrderedRun:
    """Run the blocks on ``hosts`` (``None``: localhost) and gather each block's period.

    Raises
    ------
    OrderedJobFailed
        A rank failed; the message quotes its own error line.
    """
    if block < 3:
        raise DlschedError(f"a block needs at least 3 steps to have a steady-state period, got {block}")
    config = {"model": model, "workers": workers, "batch": batch, "threads": threads, "bucket_cap_mb": bucket_cap_mb,
              "pieces": [[list(s) for s in getattr(p, "slices", p)] for p in pieces], "rounds": rounds,
              "warmup": warmup, "block": block, "timeout": timeout}
    kw = hosts.launch_args() if hosts is not None else {}
    job = launcher.launch_ranks(ENTRY, config, workers, job_timeout=timeout, grace=min(timeout, 30.0),
                                prefix="dlsched-ordered-", kind="ordered all-reduce", failed=OrderedJobFailed, **kw)
    periods = {}
    for mode in MODES:
        per_rank = np.array([[np.diff(b[1:-1]).mean() for b in res["starts"][mode]] for res in job.results])
        periods[mode] = per_rank.max(axis=0).tolist()
    gaps = [res["piece_gap"] for res in job.results if res.get("piece_gap") is not None]
    return OrderedRun(periods, max(res["max_param_diff"] for res in job.results), block,
                      float(np.median(gaps)) if gaps else 0.0)


def main(argv=None) -> None:
    launcher.rank_main(argv, "one rank of dlsched's DDP-against-ordered all-reduce job", run_rank)


if __name__ == "__main__":
    main()
