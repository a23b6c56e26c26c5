"""FSDP2 with dlsched's plan, in a user's own script: ``torchrun --nproc-per-node 2 fsdp_train.py --plan plan.json``.

``plan.json`` is ``dlsched plan-fsdp MODEL ... --write-plan plan.json``;
``apply_plan`` makes its units ``fully_shard`` units, sets their prefetch
lists and the async all-gathers. Without ``--plan`` the model is sharded as
one root unit, FSDP2's defaults. The dlsched lines are marked ``# dlsched``.
"""
import argparse

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from toy import shard, toy_model

from dlsched.hooks.fsdp import apply_plan                # dlsched
from dlsched.runtime.torchrun import exit_on_error, join, leave  # dlsched

ap = argparse.ArgumentParser()
ap.add_argument("--plan", help="the FSDP plan dlsched plan-fsdp wrote")
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--lr", type=float, default=0.1)
ap.add_argument("--out", help="rank 0 saves the trained parameters here")
a = ap.parse_args()

with exit_on_error():                                    # dlsched: one error line, exit 2
    env = join(timeout=60)                               # dlsched: env:// from torchrun, bounded
    model = toy_model()[0]
    if a.plan:
        apply_plan(model, a.plan)                        # dlsched: fully_shard as the plan says
    else:
        fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    for step in range(a.steps):
        x, y = shard(step, env.rank, env.world_size, a.batch)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        full = {n: p.full_tensor() for n, p in model.named_parameters()}  # a collective: every rank
    if env.rank == 0 and a.out:
        torch.save(full, a.out)
    dist.destroy_process_group()
leave()                                                  # dlsched: skip the teardown gloo can abort
