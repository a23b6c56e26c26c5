"""Torch's own ``DistributedDataParallel`` at a sweep of bucket caps, interleaved in one job (DESIGN §4.8).

``dlsched validate MODEL --dp ddp``'s real run. Every rank builds the model
once and wraps one deep copy of it per cap in ``DistributedDataParallel(copy,
bucket_cap_mb=cap, gradient_as_bucket_view=True)``, so each cap keeps its own
buckets (DDP fixes them when it rebuilds after its first iteration). A round
runs one training step of every cap, in an order that changes each round so that no
cap always follows the same one (:mod:`.interleave`), plus one unscored *calibration* step: the
same forward and backward of the wrapped module itself (DDP's hooks idle, no
all-reduce) and the optimizer, which gives the compute the cluster's ranks really spend beside
each other; and one unscored *beside* step, the same again while a second
thread all-reduces a buffer of the whole gradient's size from the moment backward
starts, on a gloo group of its own: how much backward and a collective slow each
other when they share the cores; and one unscored *stream* step, the same while a
thread issues small all-reduces one after another, then that stream alone for as
long: what each of the ordered all-reduce's collectives costs beside compute.
Every step starts after a barrier, so the ranks start together, and the
cluster's step time is the slowest rank's. The warm-up rounds (DDP's
first iteration, with its one whole-model bucket, among them) are dropped.

Before the rounds every rank times gloo's all-reduce of a range of sizes on
the same hosts (the median of a few calls each): the collective's cost line,
``time = a + bytes · b``, which the prediction turns into the ring's α and β;
and a copy of the whole gradient's size, every rank at once: the bytes per
second at which the hooks divide, gather and scatter gradients.

The ranks are started by :func:`dlsched.runtime.launcher.launch_ranks`, on the
hosts of :mod:`dlsched.runtime.hosts` (network namespaces with a shaped link
as root, localhost otherwise).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np

from dlsched.errors import DlschedError
from dlsched.runtime import launcher
from dlsched.runtime.gloo_release import let_go
from dlsched.runtime.ps_failures import seconds, transfer_failure

from .interleave import rotation

#: the module every rank runs (``python -m ENTRY``)
ENTRY = "dlsched.jobs.ddp_caps_run"
#: the unscored slot of each round: forward and backward of the wrapped module (no all-reduce), then the optimizer
CALIBRATION = "calibration"
#: the unscored slot of each round in which backward runs beside an all-reduce of the whole gradient's size
BESIDE = "calibration-beside"
#: the unscored slot of each round in which backward runs beside a stream of small all-reduces, one after another
#: from a thread (the ordered all-reduce's pattern): what each collective costs beside compute beyond its time alone
STREAM = "calibration-stream"
#: bytes of each all-reduce of the stream: small, so that its time is the collective's latency
STREAM_BYTES = 4096
#: calls per size when timing the all-reduce
ALLREDUCE_CALLS = 5


class DDPJobFailed(DlschedError):
    """A rank of the DDP sweep failed (a dead or stalled peer, a failed collective)."""


@dataclass
class DDPCapsRun:
    """What the job measured, per slot (a cap's ``bucket_cap_mb`` as text, or :data:`CALIBRATION`).

    ``steps[slot]`` is a ``(rounds, ranks, 6)`` array of seconds: forward + backward
    (DDP's all-reduces inside), optimizer, whole step, forward, and (else 0) for the :data:`BESIDE` slot the
    all-reduce beside backward from backward's start to its end, for the :data:`STREAM` slot the mean seconds of
    one of the stream's all-reduces beside backward, then (else 0) of one of the same stream alone, run right
    after for as long. ``allreduce`` maps bytes to the median seconds of one all-reduce, per rank
    (``(sizes, ranks)``).
    """

    caps: list[float]
    steps: dict
    allreduce_bytes: list[int]
    allreduce_s: np.ndarray
    workers: int
    #: bytes per second of a copy as large as the largest timed all-reduce (the median over ranks)
    copy_bps: float = 10e9

    @property
    def collective_excess_s(self) -> float:
        """What one collective of a stream issued one after another from a thread costs beside backward beyond
        its time alone (the median over rounds and ranks of the paired difference, at least 0): on a busy CPU
        each one waits for its threads to be scheduled (about 3 ms each beside the transformer's backward on 2
        cores, against 0.4 ms alone). The ordered all-reduce pays it once per piece (``HostCosts.per_piece_s``).

        The baseline is the same stream alone, right after in the same round: the same thread, group and
        pattern, a moment later. One barrier-started all-reduce timed before the rounds holds the barrier's exit
        skew and that moment's machine state: on one transformer job it exceeded the stream beside backward, and
        the cost came out 0 where paired rounds give 1.4–1.6 ms."""
        if STREAM not in self.steps:
            return 0.0
        s = self.steps[STREAM]
        return max(0.0, float(np.median(s[:, :, 4] - s[:, :, 5])))

    def step_times(self, slot: str) -> np.ndarray:
        """The cluster's step time per measured round: the slowest rank's."""
        return self.steps[slot][:, :, 2].max(axis=1)


def slot_name(cap: float | None) -> str:
    """A cap's slot: its ``bucket_cap_mb``, or ``default`` for DDP's own (25 MiB, the first bucket 1 MiB)."""
    return "default" if cap is None else f"{cap:g}"


def _median_s(dist, call) -> float:
    """The median seconds of :data:`ALLREDUCE_CALLS` calls of ``call()``, every rank starting each at once."""
    runs = []
    for _ in range(ALLREDUCE_CALLS):
        dist.barrier()
        t0 = time.perf_counter()
        call()
        runs.append(time.perf_counter() - t0)
    return float(np.median(runs))


def _timed_allreduce(dist, torch, nbytes: int) -> float:
    t = torch.zeros(max(1, nbytes // 4))
    return _median_s(dist, lambda: dist.all_reduce(t))


def _timed_copy(dist, torch, nbytes: int) -> float:
    """Bytes per second of one copy of ``nbytes``, every rank copying at once as the hooks do: what dividing or
    gathering a gradient costs (``HostCosts.copy_bandwidth``)."""
    src, dst = torch.ones(max(1, nbytes // 4)), torch.empty(max(1, nbytes // 4))
    return src.numel() * 4 / max(_median_s(dist, lambda: dst.copy_(src)), 1e-9)


class _Beside:
    """An all-reduce of ``nbytes`` in a second thread, on a gloo group of its own, while backward runs."""

    def __init__(self, dist, torch, nbytes: int, timeout: float):
        self.dist, self.buf = dist, torch.zeros(max(1, nbytes // 4))
        self.group = dist.new_group(backend="gloo", timeout=seconds(timeout))
        self.timeout, self.thread, self.end, self.error = timeout, None, None, None

    def _run(self) -> None:
        try:
            self.dist.all_reduce(self.buf, group=self.group)
            self.end = time.perf_counter()
        except Exception as e:  # noqa: BLE001 - raised in the rank's thread by join()
            self.error = e

    def start(self) -> None:
        import threading
        self.end = self.error = None
        self.thread = threading.Thread(target=self._run, name="dlsched-beside-allreduce", daemon=True)
        self.thread.start()

    def join(self) -> float:
        """When the all-reduce ended (``perf_counter``); raises what it raised."""
        self.thread.join(self.timeout)
        if self.error is not None:
            raise self.error
        if self.end is None:
            raise TimeoutError(f"the all-reduce beside backward did not end within {self.timeout:g} s")
        return self.end


class Stream(_Beside):
    """All-reduces of ``nbytes`` one after another in a thread, on a group of their own, from :meth:`start` until
    :meth:`join`: the ordered all-reduce's pattern beside backward. ``count``: how many ran."""

    def __init__(self, dist, torch, nbytes: int, timeout: float):
        super().__init__(dist, torch, nbytes, timeout)
        import threading
        self.stop, self.count = threading.Event(), 0

    def _run(self) -> None:
        try:
            while True:
                # every rank must issue as many: the stop flag travels in each collective's first element
                self.buf[0] = 1.0 if self.stop.is_set() else 0.0
                self.dist.all_reduce(self.buf, group=self.group)
                self.count += 1
                if self.buf[0] > 0:
                    break
            self.end = time.perf_counter()
        except Exception as e:  # noqa: BLE001 - raised in the rank's thread by join()
            self.error = e

    def start(self) -> None:
        self.stop.clear()
        self.count = 0
        super().start()

    def join(self) -> float:
        """When the last collective ended (``perf_counter``); raises what the thread raised."""
        self.stop.set()
        return super().join()


def _stream_alone(dist, stream: Stream, seconds_: float) -> float:
    """The mean seconds of one of ``stream``'s all-reduces with nothing else running, over ``seconds_`` (as long
    as the backward it ran beside; at least 50 ms), every rank starting after a barrier."""
    dist.barrier()
    t0 = time.perf_counter()
    stream.start()
    time.sleep(max(seconds_, 0.05))
    return (stream.join() - t0) / max(1, stream.count)


def join_with_model(config: dict):
    """Join the job as a torchrun rank would (the launcher sets torchrun's variables; bounded by the config's
    ``timeout``), with the config's intra-op threads, and build its model in training mode: ``(module, inputs)``.

    Raises
    ------
    TorchrunError
        The rendezvous failed or timed out.
    ImportFailure
        The model's factory cannot be loaded or called.
    """
    import torch

    from dlsched.factory import call_factory
    from dlsched.runtime.torchrun import join
    torch.set_num_threads(config["threads"])
    join(config["timeout"])
    module, inputs, _ = call_factory(config["model"], batch=config["batch"])
    module.train()
    return module, inputs


def run_rank(config: dict, rank: int, init_method: str) -> dict:
    """One rank of the sweep (the launcher's ``run_rank``): its step records and all-reduce timings."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dlsched.factory import training_loss
    module, inputs = join_with_model(config)
    replicas, opts = {}, {}
    try:
        for cap in config["caps"]:
            replica = DDP(copy.deepcopy(module), bucket_cap_mb=cap, gradient_as_bucket_view=True)
            replicas[slot_name(cap)] = replica
            opts[slot_name(cap)] = torch.optim.SGD(replica.parameters(), lr=1e-3)
        sizes = config["allreduce_bytes"]
        allreduce = [_timed_allreduce(dist, torch, n) for n in sizes]
        copy_bps = _timed_copy(dist, torch, max(sizes))
        beside = _Beside(dist, torch, max(sizes), config["timeout"])
        stream = Stream(dist, torch, STREAM_BYTES, config["timeout"])
        slots = [*replicas, CALIBRATION, BESIDE, STREAM]
        first = next(iter(replicas))
        records = {s: [] for s in slots}
        for r in range(config["warmup"] + config["iterations"]):
            for slot in rotation(slots, r):
                bare = slot in (CALIBRATION, BESIDE, STREAM)
                link = {BESIDE: beside, STREAM: stream}.get(slot)
                ddp, opt = (replicas[first], opts[first]) if bare else (replicas[slot], opts[slot])
                dist.barrier()
                t0 = time.perf_counter()
                # calibration: the wrapped module itself, so DDP's hooks stay idle (under no_sync, torch 2.13's
                # DDP on gloo still spent a whole-model all-reduce's time in backward)
                loss = training_loss((ddp.module if bare else ddp)(*inputs))
                tf = time.perf_counter()
                if link is not None:
                    link.start()
                loss.backward()  # in a DDP step its all-reduces run inside, overlapping the rest of backward
                t1 = time.perf_counter()
                comm = alone = 0.0
                if slot == BESIDE:
                    comm = beside.join() - tf
                elif slot == STREAM:
                    comm = (stream.join() - tf) / max(1, stream.count)
                opt.step()
                opt.zero_grad(set_to_none=False)
                t2 = time.perf_counter()
                if slot == STREAM:
                    alone = _stream_alone(dist, stream, t1 - tf)
                if r >= config["warmup"]:
                    records[slot].append((t1 - t0, t2 - t1, t2 - t0, tf - t0, comm, alone))
        dist.barrier()
        let_go([beside.buf, stream.buf], config["timeout"])  # before the rank may end (runtime/gloo_release)
    except DlschedError:
        raise
    except Exception as e:
        raise transfer_failure(f"rank {rank}: DDP's collective failed", e) from None
    return {"rank": rank, "records": records, "allreduce": allreduce, "copy_bps": copy_bps}


def run_caps(model: str, caps: list[float], *, workers: int, batch: int, threads: int, iterations: int,
             warmup: int, allreduce_bytes: list[int], timeout: float, hosts=None) -> DDPCapsRun:
    """Run the sweep on ``hosts`` (:class:`dlsched.runtime.hosts.Hosts`; ``None``: localhost) and gather it.

    Raises
    ------
    DDPJobFailed
        A rank failed: its message quotes the rank's own error line.
    """
    config = {"model": model, "caps": list(caps), "workers": workers, "batch": batch, "threads": threads,
              "iterations": iterations, "warmup": warmup, "allreduce_bytes": list(allreduce_bytes),
              "timeout": timeout}
    kw = hosts.launch_args() if hosts is not None else {}
    job = launcher.launch_ranks(ENTRY, config, workers, job_timeout=timeout, grace=min(timeout, 30.0),
                                prefix="dlsched-ddp-", kind="DDP", failed=DDPJobFailed, **kw)
    results = sorted(job.results, key=lambda r: r["rank"])
    steps = {s: np.array([[res["records"][s][i] for res in results]
                          for i in range(iterations)], dtype=float) for s in results[0]["records"]}
    return DDPCapsRun(list(caps), steps, list(allreduce_bytes),
                      np.array([res["allreduce"] for res in results], dtype=float).T, workers,
                      float(np.median([res["copy_bps"] for res in results])))


def main(argv=None) -> None:
    launcher.rank_main(argv, "one rank of dlsched's DDP bucket-cap sweep", run_rank)


if __name__ == "__main__":
    main()
