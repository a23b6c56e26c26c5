"""The tiny model and data the torchrun examples share, and the single-process training they must equal.

Rank ``r`` of ``world`` takes rows ``r*batch .. (r+1)*batch`` of each step's
global batch; every hook averages the ranks' gradients of a mean loss, so after
``steps`` steps the parameters equal plain SGD on the global batch (:func:`reference`).
"""
from __future__ import annotations

import torch
from torch import nn

DIM = 8


def toy_model(batch: int = 2):
    """``(module, example_inputs)``: a seeded two-layer MLP (the factory form the PS hook takes)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(DIM, 16), nn.Tanh(), nn.Linear(16, 1)), (torch.randn(batch, DIM),)


def global_batch(step: int, rows: int):
    """``(x, y)`` of ``step``: ``rows`` samples, the same on every rank."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(rows, DIM, generator=g)
    return x, torch.randn(rows, 1, generator=g)


def shard(step: int, rank: int, world: int, batch: int):
    """This rank's ``batch`` rows of the step's global batch of ``world * batch``."""
    x, y = global_batch(step, world * batch)
    return x[rank * batch:(rank + 1) * batch], y[rank * batch:(rank + 1) * batch]


def reference(steps: int, world: int, batch: int, lr: float) -> dict:
    """Single-process SGD on the global batches: what every example's rank 0 must end with."""
    model = toy_model()[0]
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for t in range(steps):
        x, y = global_batch(t, world * batch)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}
