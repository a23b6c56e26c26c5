"""DDP with dlsched's plan, in a user's own script: ``torchrun --nproc-per-node 2 ddp_train.py --plan plan.json``.

``plan.json`` is ``dlsched plan-ddp MODEL ... --json``; its ``ddp_kwargs``
(``bucket_cap_mb``, ``gradient_as_bucket_view``) go to DistributedDataParallel.
The dlsched lines are marked ``# dlsched``.
"""
import argparse

import torch
import torch.distributed as dist
from toy import shard, toy_model

from dlsched.hooks.ddp_plan import ddp_kwargs          # dlsched
from dlsched.runtime.torchrun import exit_on_error, join, leave  # dlsched

ap = argparse.ArgumentParser()
ap.add_argument("--plan", help="the JSON report of dlsched plan-ddp")
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--lr", type=float, default=0.1)
ap.add_argument("--out", help="rank 0 saves the trained parameters here")
a = ap.parse_args()

with exit_on_error():                                    # dlsched: one error line, exit 2
    env = join(timeout=60)                               # dlsched: env:// from torchrun, bounded
    kwargs = ddp_kwargs(a.plan) if a.plan else {}        # dlsched: the plan's DDP arguments
    model = torch.nn.parallel.DistributedDataParallel(toy_model()[0], **kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    for step in range(a.steps):
        x, y = shard(step, env.rank, env.world_size, a.batch)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    if env.rank == 0 and a.out:
        torch.save({n: p.detach() for n, p in model.module.named_parameters()}, a.out)
    dist.destroy_process_group()
leave()                                                  # dlsched: skip the teardown gloo can abort
