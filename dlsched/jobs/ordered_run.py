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
from dataclasses import asdict, dataclass, field

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
    #: per rank, the hook's record of each measured ordered step (:class:`~dlsched.hooks.ordered_allreduce.StepRecord`
    #: as a dict): where the real step's time went, to set beside the simulated schedule
    timelines: list = field(default_factory=list)


def piece_gap(records, pieces) -> float | None:
    """The link's idle time per piece that the communication thread causes: from one piece's landing to the
    next one's issue, over the pieces whose gradients were all ready before the previous piece landed (so
    nothing was waited for), the median; ``None`` when no piece qualifies. The hook gathers a ready piece while
    the one before is on the link and starts it the moment that one lands
    (:mod:`dlsched.hooks.ordered_allreduce`), so this is the hand-off alone unless gathering outlasts a
    transfer."""
    names = [{s[0] for s in piece} for piece in pieces]
    gaps = []
    for rec in records:
        for i in range(len(rec.pieces) - 1):
            done, issued = rec.pieces[i][1], rec.pieces[i + 1][0]
            ready = [rec.ready_s.get(n) for n in names[i + 1]]
            if all(t is not None and t <= done for t in ready):
                gaps.append(max(0.0, issued - done))
    return float(np.median(gaps)) if gaps else None


def piece_meets(timelines: list) -> dict | None:
    """Each piece's all-reduce on one clock, from every rank's records of the same steps (``timelines[rank]``:
    :attr:`OrderedRun.timelines`): per piece, the median over steps of ``wait_s``, how long a rank waited for
    the last rank to issue it (the mean over ranks), and of ``link_s``, from the last rank's issue to the first
    rank's landing (the collective itself, which the simulator's link charges); ``None`` without a step every
    rank recorded. The simulator has one rank, so the waits are what it leaves out.

    Examples
    --------
    >>> a = {"step": 0, "started_at": 10.0, "pieces": [[0.1, 0.3], [0.3, 0.5]]}
    >>> b = {"step": 0, "started_at": 10.05, "pieces": [[0.1, 0.25], [0.25, 0.45]]}
    >>> {k: [round(x, 3) for x in v] for k, v in piece_meets([[a], [b]]).items()}
    {'wait_s': [0.025, 0.0], 'link_s': [0.15, 0.2]}
    """
    by_step = [{t["step"]: t for t in tl if t.get("started_at") is not None} for tl in timelines]
    steps = sorted(set.intersection(*(set(d) for d in by_step))) if by_step else []
    waits, links = [], []
    for k in steps:
        recs = [d[k] for d in by_step]
        if len({len(r["pieces"]) for r in recs}) != 1:
            continue
        issued = np.array([[r["started_at"] + p[0] for p in r["pieces"]] for r in recs])
        landed = np.array([[r["started_at"] + p[1] for p in r["pieces"]] for r in recs])
        last = issued.max(axis=0)
        waits.append((last - issued).mean(axis=0))
        links.append(landed.min(axis=0) - last)
    if not waits:
        return None
    return {"wait_s": np.median(waits, axis=0).tolist(), "link_s": np.median(links, axis=0).tolist()}


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
    measured, ordered_steps = set(), 0  # the hook counts only the ordered steps
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
                if mode == "ordered":
                    if r >= config["warmup"]:
                        measured.update(range(ordered_steps, ordered_steps + config["block"]))
                    ordered_steps += config["block"]
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
                                                                                            config["pieces"]),
            "timeline": [asdict(r) for r in oar.records if r.step in measured]}


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
                      float(np.median(gaps)) if gaps else 0.0, [res.get("timeline", []) for res in job.results])


def main(argv=None) -> None:
    launcher.rank_main(argv, "one rank of dlsched's DDP-against-ordered all-reduce job", run_rank)


if __name__ == "__main__":
    main()
