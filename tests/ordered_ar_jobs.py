"""Real 2-rank gloo jobs for ``tests/test_ordered_allreduce.py``: torch's DDP against the ordered all-reduce.

:func:`run_job` launches ``world`` ranks of this module (:func:`dlsched.runtime.launcher.launch_ranks`);
each rank builds ``examples/torch_models.py``'s ``small_cnn`` from the same seed, trains it ``steps``
steps on data of its own (drawn from its rank and the step) with cross-entropy and SGD with momentum:

- ``ddp``: torch's own :class:`~torch.nn.parallel.DistributedDataParallel`, ``optimizer.step()``;
- each schedule of ``schedules`` (name → pieces): a fresh copy of the model under
  :class:`~dlsched.hooks.ordered_allreduce.OrderedAllreduce`, per-parameter optimizers, no ``step()``.

A schedule given as ``"per-parameter"`` is :func:`~dlsched.hooks.ordered_allreduce.pieces_per_parameter`
of the rank's model, one given as ``{"order_file": PATH}`` the pieces of that order file; ``unused`` adds a parameter the loss never reaches. Each rank returns its flat parameters after each run and the hook's step records. ``fail`` makes
rank ``fail["rank"]`` SIGKILL or SIGSTOP itself in step ``fail["step"]`` of the first schedule, between
forward and backward, after writing the time to ``fail["dir"]/victim``; a survivor that catches
:class:`~dlsched.hooks.ordered_allreduce.OrderedAllreduceError` writes the time to
``fail["dir"]/rank{R}`` and re-raises it, so :func:`~dlsched.runtime.launcher.rank_main` exits 2.

The caller holds ``/tmp/dlsched-heavy.lock`` (the pytest command runs under ``flock``).

Also the rank's entry point: ``python -m tests.ordered_ar_jobs --config ... --rank R ...``.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = f"{REPO / 'examples' / 'torch_models.py'}:small_cnn"


def model_and_names(batch: int = 8):
    """A fresh ``small_cnn`` (seed 0) and its example input."""
    from dlsched.factory import call_factory
    module, inputs, _ = call_factory(MODEL, batch)
    return module.train(), inputs


def run_job(config: dict, world: int = 2, limit: float = 240.0, grace: float = 20.0):
    """Run the job; returns :class:`~dlsched.runtime.launcher.JobResult` (raises ``JobFailed``)."""
    from dlsched.runtime.launcher import launch_ranks
    return launch_ranks("tests.ordered_ar_jobs", {**config, "world": world}, world, job_timeout=limit, grace=grace,
                        prefix="dlsched-oar-test-", kind="ordered all-reduce")


def _batch(cfg, rank: int, step: int):
    import torch
    g = torch.Generator().manual_seed(1000 * rank + step + 1)
    return torch.randn(cfg["batch"], 3, 32, 32, generator=g), torch.randint(0, 10, (cfg["batch"],), generator=g)


def _flat(model):
    import torch
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def _ddp(cfg, rank):
    import torch
    model, _ = model_and_names(cfg["batch"])
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    for t in range(cfg["steps"]):
        x, y = _batch(cfg, rank, t)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return _flat(model)


def _ordered(cfg, rank, pieces, fail):
    import torch
    from dlsched.hooks.ordered_allreduce import OrderedAllreduce, pieces_per_parameter
    model, _ = model_and_names(cfg["batch"])
    if cfg.get("unused"):  # a parameter the loss never reaches
        model.register_parameter("unused", torch.nn.Parameter(torch.zeros(3)))
    if pieces == "per-parameter":
        pieces = pieces_per_parameter(model)
    elif isinstance(pieces, dict):  # {"order_file": PATH}: what plan-ddp --write-order writes
        from dlsched.formats.allreduce_order_file import read_order_file
        pieces = read_order_file(pieces["order_file"]).pieces
    oar = OrderedAllreduce(model, pieces, lambda ps: torch.optim.SGD(ps, lr=cfg["lr"], momentum=cfg["momentum"]),
                           timeout=cfg["timeout"])
    for t in range(cfg["steps"]):
        x, y = _batch(cfg, rank, t)
        oar.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if fail and fail["rank"] == rank and fail["step"] == t:
            Path(fail["dir"], "victim").write_text(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL if fail["how"] == "kill" else signal.SIGSTOP)
        loss.backward()
    oar.close()
    return _flat(model), [asdict(r) for r in oar.records]


def run_rank(cfg: dict, rank: int, init_method: str) -> dict:
    import torch
    import torch.distributed as dist
    from dlsched.hooks.ordered_allreduce import OrderedAllreduceError
    from dlsched.runtime.ps_failures import seconds
    torch.set_num_threads(1)
    sys.setswitchinterval(2e-4)  # the communication thread gets the GIL promptly
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=cfg["world"],
                            timeout=seconds(cfg["timeout"]))
    out = {"rank": rank}
    if cfg.get("ddp"):
        out["ddp"] = _ddp(cfg, rank)
    fail = cfg.get("fail")
    for name, pieces in cfg["schedules"].items():
        try:
            out[name] = _ordered(cfg, rank, pieces, fail)
        except OrderedAllreduceError:
            if fail:
                Path(fail["dir"], f"rank{rank}").write_text(repr(time.time()))
            raise
        fail = None
    return out


def main(argv=None):
    from dlsched.runtime.launcher import rank_main
    rank_main(argv, "one rank of an ordered all-reduce test job", run_rank)


if __name__ == "__main__":
    main(sys.argv[1:])
