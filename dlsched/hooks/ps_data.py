"""The synthetic training problem of a parameter-server job and its single-process solution.

Each iteration has a seeded global batch (W × batch samples) and target; worker
``w`` takes rows ``w*batch .. (w+1)*batch`` of both and minimises
:func:`loss_of`, the mean square error to the target. It is not
:func:`dlsched.factory.training_loss` (the loss of a model's real training
step, for capture and memory measurement): here the loss only has to be a
mean over samples, so that :func:`reference_train` on the global batch gives
the parameters that the servers reach by averaging the workers' gradients.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .ps_model import build_model

if TYPE_CHECKING:
    from .ps_config import PSConfig


def global_batch(cfg: PSConfig, example_inputs, iteration: int):
    """The synthetic global batch of ``iteration`` (W × batch samples); worker w
    takes rows ``w*batch .. (w+1)*batch``. Integer inputs (token ids) keep their range."""
    import torch
    g = torch.Generator().manual_seed(cfg.seed * 100003 + iteration)
    n = cfg.workers * cfg.batch
    out = []
    for x in example_inputs:
        shape = (n, *x.shape[1:])
        if x.dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g, dtype=x.dtype))
        else:
            out.append(torch.randint(0, int(x.max()) + 1, shape, generator=g, dtype=x.dtype))
    return out


def global_target(cfg: PSConfig, out_shape, iteration: int):
    """The synthetic global target of ``iteration``, shaped like the output of the global batch."""
    import torch
    g = torch.Generator().manual_seed(cfg.seed * 100003 + iteration + 7919)
    return torch.randn((cfg.workers * cfg.batch, *out_shape[1:]), generator=g)


def loss_of(output, target):
    """The loss each worker minimises: mean square error of ``output`` to ``target``."""
    return ((output - target) ** 2).mean()


def reference_train(cfg: PSConfig) -> dict:
    """Single-process SGD on the same global batches; returns ``{name: tensor}``.

    Equal to PS training because each worker's loss is the mean over its equal
    share of the batch, and the servers average the workers' gradients."""
    import torch
    torch.set_num_threads(max(1, cfg.threads))
    module, inputs = build_model(cfg)
    module.train()
    opt = torch.optim.SGD(module.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    for it in range(cfg.iterations):
        xs = global_batch(cfg, inputs, it)
        out = module(*xs)
        loss = loss_of(out, global_target(cfg, out.shape, it))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {n: p.detach().clone() for n, p in module.named_parameters()}
