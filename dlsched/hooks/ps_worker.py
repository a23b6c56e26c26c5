"""The worker side of a parameter-server job: compute as soon as each layer's parameters are in.

At the start of an iteration every parameter's receive is posted and completed
lazily: a forward pre-hook on each module waits only for that module's own
parameters, so compute starts as soon as the first layer's weights are in and
overlaps with the transfers still in flight. After backward each gradient goes
back to its server as soon as it is accumulated. In inference the worker only
runs the forward pass and sends each server a one-element done message, so
iterations stay synchronous, as in TicTac's inference workload. With a batch
policy the worker first receives its slice of the global batch from server 0,
scales its loss by ``n·b_i/X`` and, after its gradients, reports its busy time
(compute without the waits for parameters) through
:class:`~dlsched.runtime.batch_manager.WorkerShare`.

The state of the waits (which module waits for which parameters, when compute
started, what has arrived) lives on :class:`PSWorker`; the hooks registered on
the model are its bound methods.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from dlsched.runtime.ps_config import PSConfig
from dlsched.runtime.ps_data import batch_rows, loss_of, target_rows
from dlsched.runtime.ps_failures import (PSTrainingError, post_and_wait, post_transfer, seconds, transfer_failure,
                                         wait_transfer)
from dlsched.runtime.ps_protocol import Tags, send_order
from dlsched.timeline import IterationRecord, Timeline


class ParameterReceiver:
    """Posts one iteration's parameter receives and completes them in waiter threads.

    Each arrival is time-stamped when it happens, in its waiter thread: gloo's
    ``is_completed`` only turns true once someone waits.

    Parameters
    ----------
    cfg : PSConfig
    module : torch.nn.Module
        The worker's model, whose parameters the receives fill.
    pool : concurrent.futures.ThreadPoolExecutor
        Runs the waiter threads (one per parameter).
    device : torch.device
        On CUDA, receives land in pinned CPU buffers (gloo needs CPU tensors)
        and are copied to the parameter on arrival.
    """

    def __init__(self, cfg: PSConfig, module, pool, device):
        import torch
        self.cfg, self.pool = cfg, pool
        self.params = dict(module.named_parameters())
        self.tags = Tags(cfg.order)
        self.cuda = device.type == "cuda"
        self.staging = {n: torch.empty(p.shape, dtype=p.dtype, pin_memory=True) for n, p in self.params.items()} \
            if self.cuda else {}

    def start(self, worker: int, it: int) -> None:
        """Post every receive of iteration ``it`` of worker index ``worker``."""
        import torch.distributed as dist
        self.arrivals: dict[str, float] = {}
        self.errors: dict[str, BaseException] = {}
        self.stalls: list[list[float]] = []  # [start, end] of each wait that blocked (compute idle)
        self.events = {n: threading.Event() for n in self.cfg.order}
        self.worker, self.it = worker, it
        # post in each server's send order, so backends that match by posting order also work
        for s in range(self.cfg.servers):
            for n in send_order(self.cfg, s, worker, it):
                buf = self.staging[n] if self.cuda else self.params[n].data
                work = post_transfer(lambda: dist.irecv(buf, s, tag=self.tags.param(n)),
                                     f"worker {worker}: receiving {n!r} from server {s} in iteration {it}")
                self.pool.submit(self._complete, n, work)

    def _complete(self, name, work):
        try:
            work.wait(seconds(self.cfg.timeout))
            self.arrivals[name] = time.perf_counter()
            if self.cuda:
                self.params[name].data.copy_(self.staging[name], non_blocking=False)
        except BaseException as e:  # handed to the waiting compute thread
            self.errors[name] = e
        finally:
            self.events[name].set()

    def wait_for(self, name: str) -> None:
        """Block until parameter ``name`` has arrived.

        Raises
        ------
        PSTrainingError
            It did not arrive within the timeout, or its receive failed.
        """
        ev = self.events[name]
        blocked = None if ev.is_set() else time.perf_counter()
        if not ev.wait(self.cfg.timeout + 5):
            raise transfer_failure(f"worker {self.worker}: parameter {name!r} did not arrive within "
                                   f"{self.cfg.timeout:g} s in iteration {self.it}")
        if name in self.errors:
            raise transfer_failure(f"worker {self.worker}: receiving {name!r} from server "
                                   f"{self.cfg.server_of(name)} in iteration {self.it} failed", self.errors[name])
        if blocked is not None:
            self.stalls.append([blocked, time.perf_counter()])


class PSWorker:
    """Worker ``rank - cfg.servers`` of the job, training (or running) ``module`` on its share of each batch.

    Parameters
    ----------
    cfg : PSConfig
    rank : int
        This process's rank (servers come first).
    module : torch.nn.Module
    inputs : tuple of torch.Tensor
        The factory's example inputs, which give the batch's shapes and dtypes.
    """

    def __init__(self, cfg: PSConfig, rank: int, module, inputs):
        import torch
        self.cfg, self.module, self.inputs = cfg, module, inputs
        self.worker = rank - cfg.servers
        self.device = torch.device(cfg.device)
        self.training = cfg.mode == "training"
        self.params = dict(module.named_parameters())
        self.tags = Tags(cfg.order)
        #: each module with parameters of its own → their full names, which its pre-hook waits for
        self.waits: dict = {}
        self.compute_start: float | None = None
        self.sends: list = []  # (name, gradient, work) of this iteration's gradient sends
        self.blocked = 0.0  # seconds waited for parameters since compute started (not busy time)
        self.share = None
        self.out_shape = None  # the forward's output shape, once known: the target's shape
        self.next_batch = None  # (iteration, future of its inputs and target), made ahead
        if cfg.batch_policy is not None:
            from dlsched.runtime.batch_manager import WorkerShare
            self.share = WorkerShare(cfg, self.worker)  # per-iteration slice of the global batch, from server 0

    def run(self) -> dict:
        """Run every iteration; returns ``{"timeline": {...}}`` (:class:`~dlsched.timeline.Timeline`).

        Raises
        ------
        PSTrainingError
            A transfer failed or timed out, or a parameter got no gradient.
        """
        from concurrent.futures import ThreadPoolExecutor
        sys.setswitchinterval(2e-4)  # waiter threads get the GIL promptly, so arrival stamps are tight
        self.module.to(self.device)
        self.module.train(self.training)
        pool = ThreadPoolExecutor(max_workers=len(self.cfg.order), thread_name_prefix="dlsched-recv")
        self.pool = pool
        self.data_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlsched-data")
        self.recv = ParameterReceiver(self.cfg, self.module, pool, self.device)
        self._register_hooks()
        timeline = Timeline()
        for it in range(self.cfg.iterations):
            timeline.records.append(self._iteration(it))
        pool.shutdown(wait=False)
        self.data_pool.shutdown(wait=False)
        return {"timeline": timeline.to_dict()}

    def _register_hooks(self) -> None:
        import torch.distributed as dist
        for prefix, m in self.module.named_modules():
            own = [(prefix + "." if prefix else "") + pn for pn, _ in m.named_parameters(recurse=False)]
            if own:
                self.waits[m] = own
                m.register_forward_pre_hook(self._before_forward)
        if self.training:
            tags, cfg = self.tags, self.cfg

            def grad_hook(name):
                def hook(p):
                    g = p.grad.detach().to("cpu") if self.recv.cuda else p.grad.detach()
                    posted = time.perf_counter()
                    work = post_transfer(lambda: dist.isend(g, cfg.server_of(name), tag=tags.grad(name)),
                                         f"worker {self.worker}: sending the gradient of {name!r} in iteration "
                                         f"{self.recv.it}")
                    # completed in a waiter thread, so the timeline gets the send's real end
                    self.sends.append((name, g, self.pool.submit(self._sent, name, work, posted)))
                return hook
            for n, p in self.params.items():
                p.register_post_accumulate_grad_hook(grad_hook(n))

    def _sent(self, name: str, work, posted: float) -> list[float]:
        """Wait for one gradient send (in a waiter thread); returns its ``[post, completion]`` times."""
        wait_transfer(work, f"worker {self.worker}: sending the gradient of {name!r} in iteration {self.recv.it}",
                      self.cfg.timeout)
        return [posted, time.perf_counter()]

    def _before_forward(self, mod, args) -> None:
        t = time.perf_counter()
        for n in self.waits[mod]:
            self.recv.wait_for(n)
        if self.compute_start is None:
            self.compute_start = time.perf_counter()
        else:
            self.blocked += time.perf_counter() - t

    def _make_batch(self, it: int, rows: slice, out_shape) -> tuple:
        """Iteration ``it``'s inputs and, once the output's shape is known, its target (training)."""
        cfg = self.cfg
        xs = [x.to(self.device) for x in batch_rows(cfg, self.inputs, it, rows.start, rows.stop)]
        tgt = None
        if self.training and out_shape is not None:
            tgt = target_rows(cfg, out_shape, it, rows.start, rows.stop).to(self.device)
        return xs, tgt

    def _batch(self, it: int, rows: slice) -> tuple:
        """Iteration ``it``'s inputs and target: the ones made ahead in the data thread, else made now.

        Made inline, the synthetic batch (16-21 ms for vgg_mid's 2×128
        images) sat between one iteration and the next with the receives not
        yet posted, and a server with a window of one waited for it before its
        next send to either worker: every iteration started 20 ms late, which
        no profiled op accounts for (issue 33)."""
        ahead, self.next_batch = self.next_batch, None
        if ahead is not None and ahead[0] == it:
            return ahead[1].result()
        return self._make_batch(it, rows, self.out_shape)

    def _iteration(self, it: int) -> IterationRecord:
        import torch
        import torch.distributed as dist
        cfg, w = self.cfg, self.worker
        rows = self.share.receive(it) if self.share else slice(w * cfg.batch, (w + 1) * cfg.batch)
        xs, tgt = self._batch(it, rows)
        if cfg.fail_worker == w and cfg.fail_iteration == it:
            time.sleep(0.2)  # mid-iteration: servers have started sending
            if cfg.fail_how == "stall":
                time.sleep(10 * cfg.timeout + 60)
            os._exit(17)
        start = time.perf_counter()
        self.compute_start, self.blocked = None, 0.0
        self.recv.start(w, it)
        if not self.share and it + 1 < cfg.iterations:  # made while this iteration runs, as a DataLoader does
            self.next_batch = (it + 1, self.data_pool.submit(self._make_batch, it + 1, rows, self.out_shape))
        for p in self.params.values():
            p.grad = None
        if self.training:
            out = self.module(*xs)
            waited = time.perf_counter()
            for n in cfg.order:  # parameters the forward did not touch
                self.recv.wait_for(n)
            self.blocked += time.perf_counter() - waited
            self.out_shape = out.shape
            if tgt is None:
                tgt = target_rows(cfg, out.shape, it, rows.start, rows.stop).to(self.device)
            loss = loss_of(out, tgt) if rows.stop > rows.start else out.sum()  # no rows: zero gradients
            if self.share:
                loss = loss * self.share.weight  # n·b_i/X (paper Alg. 3): the servers' mean is unbiased
            loss.backward()
            compute_end = time.perf_counter()
            grad_sends = {n: f.result() for n, _, f in self.sends}  # raises the waiter's PSTrainingError
            missing = set(cfg.order) - {n for n, _, _ in self.sends}
            if missing:
                raise PSTrainingError(f"worker {w}: no gradient for {sorted(missing)[:5]} in iteration {it}; "
                                      "PS training needs every parameter to take part in the loss")
            self.sends.clear()
            if self.share:  # busy time: compute, without the waits for parameters
                self.share.report(it, compute_end - (self.compute_start or compute_end) - self.blocked)
        else:
            with torch.no_grad():
                self.module(*xs)
            compute_end, grad_sends = time.perf_counter(), {}
            for n in cfg.order:
                self.recv.wait_for(n)
            tok = torch.ones(1)
            for s in range(cfg.servers):
                post_and_wait(lambda: dist.isend(tok, s, tag=self.tags.done),
                              f"worker {w}: sending the done message in iteration {it}", cfg.timeout)
        if self.recv.cuda:
            torch.cuda.synchronize()
        end = time.perf_counter()
        return IterationRecord(
            w, it, start, self.compute_start or end, end, dict(self.recv.arrivals),
            {n: cfg.server_of(n) for n in cfg.order},
            {s: send_order(cfg, s, w, it) for s in range(cfg.servers)}, compute_end, grad_sends=grad_sends,
            stalls=self.recv.stalls)
