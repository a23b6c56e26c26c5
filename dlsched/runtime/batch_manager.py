"""Per-worker batch sizes that follow each worker's speed, in a parameter-server job (LB-BSP, paper ``002_*``).

With ``PSConfig.batch_policy`` set, every iteration's global batch of ``X``
samples is split anew (DESIGN §5.1, paper Algorithm 3):

1. server 0's :class:`BatchManager` sends each worker its slice of the global
   batch (offset and size; tag ``Tags.slice``);
2. the worker (:class:`WorkerShare`) trains on those rows and pushes its
   gradient weighted by ``n·b_i/X``, so the servers' mean over the ``n``
   workers is ``(1/X)·Σ b_i·g_i``, the gradient of the whole global batch;
3. the worker reports its busy time (forward and backward, *excluding* waits
   for parameters: otherwise every worker's time is the same), its CPU share
   (its cgroup's quota, :func:`~dlsched.runtime.cgroups.cpu_share`) and memory
   (tag ``Tags.report``);
4. the manager hands the sizes, times and readings to the policy
   (:func:`dlsched.planning.batch_policies.make_policy`), whose answer is the
   next iteration's split, and records the iteration in its history.

Examples
--------
>>> gradient_weight(size=48, global_batch=64, workers=2)
1.5
>>> slices([3, 1])
[(0, 3), (3, 1)]
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from dlsched.errors import DlschedError

from .cgroups import cpu_share, memory_fraction
from .ps_config import PSConfig, PSConfigError
from .ps_data import global_size
from .ps_failures import post_and_wait, wait_transfer
from .ps_protocol import Tags, worker_rank

#: the fields of a worker's report, in the order they travel
REPORT = ("busy", "cpu", "mem", "size")


def make_cfg_policy(cfg: PSConfig):
    """The policy ``cfg`` names, for its workers and global batch.

    Raises
    ------
    PSConfigError
        An unknown policy or option, or settings the policy refuses (the policy's own message).
    """
    from dlsched.planning.batch_policies import make_policy
    try:
        return make_policy(cfg.batch_policy, global_size(cfg), cfg.workers, seed=cfg.seed, **cfg.policy_options)
    except DlschedError as e:
        raise PSConfigError(f"invalid parameter-server configuration: batch policy {cfg.batch_policy!r}: {e}") \
            from None
    except TypeError as e:  # an option the policy does not take
        raise PSConfigError(f"invalid parameter-server configuration: batch policy {cfg.batch_policy!r} "
                            f"does not take the options {sorted(cfg.policy_options)} ({e})") from None


def check_policy(cfg: PSConfig) -> None:
    """Refuse a policy that cannot run ``cfg`` before any process starts (see :func:`make_cfg_policy`)."""
    make_cfg_policy(cfg)


def gradient_weight(size: int, global_batch: int, workers: int) -> float:
    """``n·b_i/X``: the weight of a worker's mean gradient over ``b_i`` samples (Alg. 3, line 8)."""
    return workers * size / global_batch


def slices(sizes: list[int]) -> list[tuple[int, int]]:
    """``(offset, size)`` of each worker's rows in the global batch, in worker order."""
    out, at = [], 0
    for b in sizes:
        out.append((at, b))
        at += b
    return out


class BatchManager:
    """Server 0's side: send the slices, collect the reports, run the policy.

    Attributes
    ----------
    sizes : list of int
        The current iteration's split.
    history : list of dict
        One entry per finished iteration: ``iteration``, ``sizes``, ``busy``
        (seconds), ``cpu`` (cores), ``mem`` (fraction), ``time`` (seconds from
        sending the slices to the next split, at server 0) and ``predicted``
        (the policy's predicted speeds, samples/s, or ``None``).
    """

    def __init__(self, cfg: PSConfig):
        self.cfg, self.tags = cfg, Tags(cfg.order)
        self.policy = make_cfg_policy(cfg)
        self.sizes = [int(b) for b in self.policy.initial_sizes()]
        self.history: list[dict] = []

    def start(self, it: int) -> None:
        """Begin iteration ``it``: say so in the progress file, send the slices, post the report receives."""
        import torch
        import torch.distributed as dist
        self.t0 = time.perf_counter()
        if self.cfg.progress:
            _write_progress(self.cfg.progress, it)
        self.sent = [dist.isend(torch.tensor(s, dtype=torch.int64), worker_rank(self.cfg, w), tag=self.tags.slice)
                     for w, s in enumerate(slices(self.sizes))]
        self.reports = [torch.zeros(len(REPORT), dtype=torch.float64) for _ in range(self.cfg.workers)]
        self.pending = [dist.irecv(r, worker_rank(self.cfg, w), tag=self.tags.report)
                        for w, r in enumerate(self.reports)]

    def finish(self, it: int) -> None:
        """End iteration ``it``: wait for the reports, record them, and ask the policy for the next split."""
        for w, (s, r) in enumerate(zip(self.sent, self.pending)):
            wait_transfer(s, f"server 0: sending worker {w} its batch in iteration {it}", self.cfg.timeout)
            wait_transfer(r, f"server 0: receiving worker {w}'s report in iteration {it}", self.cfg.timeout)
        rep = {k: [float(r[i]) for r in self.reports] for i, k in enumerate(REPORT)}
        readings = [{"cpu": c, "mem": m} for c, m in zip(rep["cpu"], rep["mem"])]
        entry = {"iteration": it, "sizes": list(self.sizes), "busy": rep["busy"], "cpu": rep["cpu"],
                 "mem": rep["mem"]}
        self.sizes = [int(b) for b in self.policy.next_sizes(self.sizes, rep["busy"], readings)]
        predicted = getattr(self.policy, "predicted", None)
        entry["predicted"] = None if predicted is None else [float(v) for v in predicted]
        entry["time"] = time.perf_counter() - self.t0
        self.history.append(entry)

    def result(self) -> dict:
        """What server 0 returns besides its parameters: the history and the policy's warnings."""
        return {"batches": self.history, "batch_warnings": list(getattr(self.policy, "warnings", []))}


def _write_progress(path: str, it: int) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    Path(tmp).write_text(str(it))
    os.replace(tmp, path)  # a reader never sees half a number


def read_progress(path: str) -> int | None:
    """The iteration server 0 is in, from the progress file (``None`` before the first)."""
    try:
        return int(Path(path).read_text())
    except (OSError, ValueError):
        return None


class WorkerShare:
    """A worker's side: receive its slice of each global batch, weight its gradient, report its time."""

    def __init__(self, cfg: PSConfig, worker: int):
        self.cfg, self.worker, self.tags = cfg, worker, Tags(cfg.order)
        self.global_batch = global_size(cfg)
        self.size = 0

    def receive(self, it: int) -> slice:
        """The rows of iteration ``it``'s global batch that this worker trains on (blocks until server 0 says)."""
        import torch
        import torch.distributed as dist
        buf = torch.zeros(2, dtype=torch.int64)
        post_and_wait(lambda: dist.irecv(buf, 0, tag=self.tags.slice),
                      f"worker {self.worker}: receiving its batch in iteration {it}", self.cfg.timeout)
        offset, self.size = int(buf[0]), int(buf[1])
        return slice(offset, offset + self.size)

    @property
    def weight(self) -> float:
        """This iteration's gradient weight ``n·b_i/X`` (1 under the naive ``aggregation="mean"``)."""
        if self.cfg.aggregation == "mean":
            return 1.0
        return gradient_weight(self.size, self.global_batch, self.cfg.workers)

    def report(self, it: int, busy: float) -> None:
        """Send server 0 this iteration's busy time and the current readings."""
        import torch
        import torch.distributed as dist
        rep = torch.tensor([busy, cpu_share(), memory_fraction(), self.size], dtype=torch.float64)
        post_and_wait(lambda: dist.isend(rep, 0, tag=self.tags.report),
                      f"worker {self.worker}: sending its report in iteration {it}", self.cfg.timeout)
