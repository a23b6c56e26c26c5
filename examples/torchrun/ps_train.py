"""The parameter-server hook in a user's own script: ``torchrun --nproc-per-node 2 ps_train.py``.

Ranks ``0 .. servers-1`` serve (they hold the parameters, send them to the
workers in priority order and apply the averaged gradients), the others train.
The model is the user's factory (``file.py:fn`` returning ``(module,
example_inputs)``); the training loop and its batches are the hook's own
(:mod:`dlsched.runtime.ps_data`), since its workers overlap each layer's compute
with the transfer of the next layer's parameters.
"""
import argparse
import os
import sys

import torch

from dlsched.hooks.torch_ps import PSConfig, exit_on_error, order_from_module, run_ps_rank  # dlsched

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toy.py:toy_model")

ap = argparse.ArgumentParser()
ap.add_argument("--servers", type=int, default=1)
ap.add_argument("--iterations", type=int, default=5)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--lr", type=float, default=0.1)
ap.add_argument("--timeout", type=float, default=60, help="seconds any one wait may take")
ap.add_argument("--out", help="each server saves its trained parameters to OUT.rankR")
a = ap.parse_args()

with exit_on_error():                                      # dlsched: one error line, exit 2
    workers = int(os.environ.get("WORLD_SIZE", 0)) - a.servers
    cfg = PSConfig(model=MODEL, order=order_from_module(MODEL), servers=a.servers, workers=max(workers, 1),
                   iterations=a.iterations, batch=a.batch, lr=a.lr, timeout=a.timeout)
    print(f"rank {os.environ.get('RANK')}: joining", file=sys.stderr, flush=True)
    result = run_ps_rank(cfg)                              # dlsched: serve or work, per RANK
    if a.out and "params" in result:
        torch.save(result["params"], f"{a.out}.rank{os.environ['RANK']}")
