"""The ordered all-reduce in a user's own script: ``torchrun --nproc-per-node 2 ordered_train.py [--order o.json]``.

``o.json`` is ``dlsched plan-ddp MODEL ... --write-order o.json``: the pieces of
the gradients in the order every rank all-reduces them. Without it each
parameter is one piece, in DDP's first-iteration order. The hook updates each
parameter as soon as its pieces are in, so the loop has no ``optimizer.step()``;
the next forward waits, module by module, only for that module's parameters.
The dlsched lines are marked ``# dlsched``.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from toy import shard, toy_model

from dlsched.formats.allreduce_order_file import read_order_file                    # dlsched
from dlsched.hooks.ordered_allreduce import OrderedAllreduce, pieces_per_parameter  # dlsched
from dlsched.runtime.torchrun import exit_on_error, join, leave                            # dlsched

ap = argparse.ArgumentParser()
ap.add_argument("--order", help="the order file of dlsched plan-ddp --write-order")
ap.add_argument("--iterations", type=int, default=5)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--lr", type=float, default=0.1)
ap.add_argument("--timeout", type=float, default=60, help="seconds any one wait may take")
ap.add_argument("--out", help="rank 0 saves the trained parameters here")
a = ap.parse_args()

with exit_on_error():                                    # dlsched: one error line, exit 2
    print(f"rank {os.environ.get('RANK')}: joining", file=sys.stderr, flush=True)
    env = join(timeout=a.timeout)                        # dlsched: env:// from torchrun, bounded
    model = toy_model()[0]
    pieces = read_order_file(a.order).pieces if a.order else pieces_per_parameter(model)       # dlsched
    oar = OrderedAllreduce(model, pieces, lambda ps: torch.optim.SGD(ps, lr=a.lr), timeout=a.timeout)  # dlsched
    print(f"rank {env.rank}: training", file=sys.stderr, flush=True)
    for step in range(a.iterations):
        x, y = shard(step, env.rank, env.world_size, a.batch)
        torch.nn.functional.mse_loss(model(x), y).backward()  # the hook all-reduces and updates
    oar.close()                                          # dlsched: the last step's updates are in
    if env.rank == 0 and a.out:
        torch.save({n: p.detach() for n, p in model.named_parameters()}, a.out)
    dist.destroy_process_group()
leave()                                                  # dlsched: skip the teardown gloo can abort
