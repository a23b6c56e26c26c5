"""The server side of a parameter-server job: send parameters in order, apply averaged gradients.

Every iteration a server sends each worker its own parameters in
:func:`~dlsched.runtime.ps_protocol.send_order` (sender-side enforcement, as
TicTac does at the gRPC layer), keeping at most ``window`` transfers per worker
in flight: transfer ``i`` starts once ``i - window`` has completed, so
``window=1`` is strictly sequential. It then averages the workers' gradients
and applies SGD (optional momentum); in inference it waits for each worker's
done message instead. With a batch policy, server 0 also runs the batch-size
manager (:class:`~dlsched.runtime.batch_manager.BatchManager`): each worker's
slice before its parameters, its report after its gradients.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from dlsched.runtime.ps_config import PSConfig
from dlsched.runtime.ps_failures import PSTrainingError, transfer_failure, wait_transfer
from dlsched.runtime.ps_protocol import Tags, send_order, worker_rank


def _send_all(cfg: PSConfig, rank: int, w: int, it: int, order: list[str], params: dict, tags: Tags) -> dict:
    """Send worker ``w`` its parameters of iteration ``it`` in ``order``, ``cfg.window`` in flight at most;
    returns when each send was posted.

    One thread per worker, as TicTac has one gRPC channel per worker–server
    pair: in one loop over positions the server could not post a worker's
    next send before every other worker's previous one had completed, so one
    worker's large tensor held up the other's small ones (under random orders,
    which differ per worker, it served the workers nearly in turn, not side by
    side as the simulator's ``fair`` links do; issue 33).
    """
    import torch.distributed as dist
    posted, inflight = {}, []
    try:
        for pos, n in enumerate(order):
            if pos >= cfg.window:
                wait_transfer(inflight[pos - cfg.window], f"server {rank}: sending {order[pos - cfg.window]!r} "
                              f"to worker {w} in iteration {it}", cfg.timeout)
            posted[n] = time.perf_counter()
            inflight.append(dist.isend(params[n].data, worker_rank(cfg, w), tag=tags.param(n)))
    except PSTrainingError:
        raise
    except Exception as e:
        raise transfer_failure(f"server {rank}: posting transfers to worker {w} in iteration {it} failed", e) \
            from None
    for pos in range(max(0, len(inflight) - cfg.window), len(inflight)):  # gloo hangs on a second wait
        wait_transfer(inflight[pos], f"server {rank}: sending {order[pos]!r} to worker {w} in iteration {it}",
                      cfg.timeout)
    return posted


def run_server(cfg: PSConfig, rank: int, module) -> dict:
    """Serve ``cfg.iterations`` iterations as server ``rank``; returns ``{"params": {name: tensor}}`` (its shard).

    Raises
    ------
    PSTrainingError
        A transfer failed or timed out.
    """
    import torch
    import torch.distributed as dist
    params = dict(module.named_parameters())
    tags = Tags(cfg.order)
    own = [n for n in cfg.order if cfg.server_of(n) == rank]
    opt = torch.optim.SGD([params[n] for n in own], lr=cfg.lr, momentum=cfg.momentum) if own else None
    training = cfg.mode == "training"
    manager = None
    if cfg.batch_policy is not None and rank == 0:
        from dlsched.runtime.batch_manager import BatchManager
        manager = BatchManager(cfg)
    sent = []  # when each send was posted, per worker and iteration (the transfer's start, for the timeline)
    senders = ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="dlsched-send")
    for it in range(cfg.iterations):
        back = []  # gradient (or done-token) receives, posted before the sends
        try:
            if manager:
                manager.start(it)  # each worker's slice of the global batch, before its parameters
            for w in range(cfg.workers):
                if training:
                    bufs = {n: torch.empty_like(params[n].data) for n in own}
                    back.append((w, bufs, [(n, dist.irecv(bufs[n], worker_rank(cfg, w), tag=tags.grad(n)))
                                           for n in own]))
                else:
                    tok = torch.zeros(1)
                    back.append((w, {}, [("done", dist.irecv(tok, worker_rank(cfg, w), tag=tags.done))]))
            orders = [send_order(cfg, rank, w, it) for w in range(cfg.workers)]
            jobs = [senders.submit(_send_all, cfg, rank, w, it, orders[w], params, tags) for w in range(cfg.workers)]
        except PSTrainingError:
            raise
        except Exception as e:
            raise transfer_failure(f"server {rank}: posting transfers in iteration {it} failed", e) from None
        sent += [{"worker": w, "iteration": it, "times": j.result()} for w, j in enumerate(jobs)]
        for w, _, works in back:
            for n, h in works:
                wait_transfer(h, f"server {rank}: receiving "
                              f"{'the gradient of ' + repr(n) if training else 'the done message'}"
                              f" from worker {w} in iteration {it}", cfg.timeout)
        if training and own:
            with torch.no_grad():
                for n in own:
                    params[n].grad = sum(b[n] for _, b, _ in back) / cfg.workers  # weighted by n·b_i/X
            opt.step()
        if manager:
            manager.finish(it)
    senders.shutdown(wait=False)
    out = {"params": {n: params[n].detach().clone() for n in own}, "sent": sent}
    return {**out, **manager.result()} if manager else out
