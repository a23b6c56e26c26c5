"""eager-SGD's partial all-reduce in a user's own loop: ``torchrun --nproc-per-node 2 partial_allreduce_train.py``.

Each step the rank hands its gradient to the schedule (``arrive``), waits only
for the round of that step (``wait_round``; in ``solo`` or ``majority`` a slow
rank's gradient joins a later round), and applies the latest sum. ``--mode
full`` is a synchronous all-reduce: it must give DDP's parameters.
"""
import argparse

import torch
import torch.distributed as dist
from toy import shard, toy_model

from dlsched.hooks.partial_allreduce import PartialAllreduce  # dlsched
from dlsched.runtime.torchrun import exit_on_error, join, leave      # dlsched

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=["solo", "majority", "full"], default="solo")
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--lr", type=float, default=0.1)
ap.add_argument("--out", help="rank 0 saves the trained parameters here")
a = ap.parse_args()

with exit_on_error():                                                 # dlsched: one error line, exit 2
    env = join(timeout=60)                                            # dlsched
    model = toy_model()[0]
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    pa = PartialAllreduce.from_env(numel, a.mode, rounds=a.steps, timeout=60)  # dlsched
    pa.start()                                                        # dlsched
    applied = -1
    for step in range(a.steps):
        x, y = shard(step, env.rank, env.world_size, a.batch)
        loss = torch.nn.functional.mse_loss(model(x), y)
        grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])
        pa.arrive(step, grad, version=applied + 1)                    # dlsched
        r, summed = pa.wait_round(step)                               # dlsched
        if r > applied:  # the latest round's sum of gradients
            with torch.no_grad():
                vec = torch.nn.utils.parameters_to_vector(params) - a.lr / env.world_size * summed
                torch.nn.utils.vector_to_parameters(vec, params)
            applied = r
    pa.join()                                                         # dlsched
    dist.barrier()
    if env.rank == 0 and a.out:
        torch.save({n: p.detach() for n, p in model.named_parameters()}, a.out)
    dist.destroy_process_group()
leave()                                                  # dlsched: skip the teardown gloo can abort
