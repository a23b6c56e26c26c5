"""The synthetic training problem of a parameter-server job and its single-process solution.

Each iteration has a seeded global batch (W × batch samples) and target; worker
``w`` takes rows ``w*batch .. (w+1)*batch`` of both and minimises
:func:`loss_of`, the mean square error to the target. With a batch policy the
global batch has ``X`` samples (:func:`global_size`) and worker ``w`` takes the
slice server 0 gives it (:func:`batch_rows`); each row is then generated from
its own seed, so a worker makes only its own rows. It is not
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


def global_size(cfg: PSConfig) -> int:
    """The number of samples in every iteration's global batch: ``X`` with a batch policy, else W × batch."""
    if cfg.batch_policy is not None and cfg.global_batch is not None:
        return cfg.global_batch
    return cfg.workers * cfg.batch


def batch_rows(cfg: PSConfig, example_inputs, iteration: int, start: int, stop: int):
    """Rows ``start .. stop`` of the global batch of ``iteration`` (inputs only).

    Without a batch policy, a slice of :func:`global_batch`; with one, each row
    comes from its own generator, so the cost is that of the rows taken."""
    if cfg.batch_policy is None:
        return [x[start:stop] for x in global_batch(cfg, example_inputs, iteration)]
    return _rows(cfg, [((1, *x.shape[1:]), x) for x in example_inputs], iteration, 0, start, stop)


def target_rows(cfg: PSConfig, out_shape, iteration: int, start: int, stop: int):
    """Rows ``start .. stop`` of the global target of ``iteration``."""
    if cfg.batch_policy is None:
        return global_target(cfg, out_shape, iteration)[start:stop]
    return _rows(cfg, [((1, *out_shape[1:]), None)], iteration, 7919, start, stop)[0]


def _rows(cfg, shapes, iteration, salt, start, stop):
    import torch
    cols = [[] for _ in shapes]
    for r in range(start, stop):
        g = torch.Generator().manual_seed((cfg.seed * 100003 + iteration + salt) * 1000003 + r)
        for col, (shape, x) in zip(cols, shapes):
            if x is None or x.dtype.is_floating_point:
                col.append(torch.randn(shape, generator=g, dtype=torch.float32 if x is None else x.dtype))
            else:
                col.append(torch.randint(0, int(x.max()) + 1, shape, generator=g, dtype=x.dtype))
    return [torch.cat(col) if col else torch.empty((0, *shape[1:]), dtype=torch.float32 if x is None else x.dtype)
            for col, (shape, x) in zip(cols, shapes)]


def global_batch(cfg: PSConfig, example_inputs, iteration: int):
    """The synthetic global batch of ``iteration`` (:func:`global_size` samples); worker w
    takes rows ``w*batch .. (w+1)*batch``. Integer inputs (token ids) keep their range."""
    import torch
    n = global_size(cfg)
    if cfg.batch_policy is not None:
        return batch_rows(cfg, example_inputs, iteration, 0, n)
    g = torch.Generator().manual_seed(cfg.seed * 100003 + iteration)
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
    if cfg.batch_policy is not None:
        return target_rows(cfg, out_shape, iteration, 0, global_size(cfg))
    g = torch.Generator().manual_seed(cfg.seed * 100003 + iteration + 7919)
    return torch.randn((cfg.workers * cfg.batch, *out_shape[1:]), generator=g)


def loss_of(output, target):
    """The loss each worker minimises: mean square error of ``output`` to ``target``."""
    return ((output - target) ** 2).mean()


def reference_train(cfg: PSConfig) -> dict:
    """Single-process SGD on the same global batches; returns ``{name: tensor}``.

    Equal to PS training because each worker's loss is the mean over its
    share of the batch, and the servers average the workers' gradients, each
    weighted by ``W·b_i/X`` when the shares differ (paper ``002_*`` Alg. 3)."""
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
