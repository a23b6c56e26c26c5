"""Solo and majority all-reduce (eager-SGD §4) on stock ``torch.distributed``.

A partial collective is run by a *persistent schedule*: one background
progress thread per process executes rounds ``0, 1, 2, …`` in order, each
exactly once. Round ``r`` starts on every process as soon as it is *activated*:

- **solo**: by the first process to arrive at step ``r`` (the initiator);
- **majority**: by the process :func:`majority_initiator` draws for ``r`` from
  the shared seed, when it arrives; every process computes the same draw;
- **full**: by the last process to arrive (a synchronous all-reduce through
  the same machinery, which checks it against DDP).

``sync_every=N`` is the limiter of the authors' code: every ``N``-th round of
solo or majority (rounds ``N − 1, 2N − 1, …``) is activated as ``full``, so no
gradient stays out of the model for long.

Activation is spread through the job's ``TCPStore``: arriving is an
``add(1)`` on the round's key, and the progress threads block in
``wait([key])``, which the store server answers as soon as the key exists
(the progress thread has its own store connection: a client serialises its
requests, so an ``add`` behind a blocked ``wait`` would never be sent). The
first ``add`` gets 1, so the initiator of a solo round is decided by the store;
several processes arriving together still create the key once, and the round
runs once. Raw gloo point-to-point would not do: a process cannot know how many
activation messages it will receive, so it cannot post matching receives, and
an unmatched gloo send can block its sender.

When round ``r`` starts, each progress thread takes its process's whole send
buffer (the fresh gradient if the process arrived at step ``r`` already, older
gradients that missed their round, or zeros) and empties it; the all-reduce
sums it together with bookkeeping elements (how many gradients went in, their
summed staleness as rounds between step and round, their summed age as rounds
completed since the step started, which processes were fresh, each process's
vote for the initiator), so the statistics travel in the same collective. A process waits
after arriving at step ``r`` only until round ``r`` is complete, then reads the
receive buffer, which holds the latest round's result (paper §5: a process that
lags more than one round sees only the latest one).

Every wait is bounded by ``timeout``: a dead peer fails gloo's collective or
the store at once, a stalled one makes them time out; either way the error
reaches the training loop as :class:`PartialCollectiveError`.

Under ``torchrun`` (a user's own training loop, docs/torchrun.md),
:meth:`PartialAllreduce.from_env` joins the job from the launcher's variables
(:func:`dlsched.runtime.torchrun.join`), opens the two store connections and
makes the schedule's own gloo group.

Public API: :class:`PartialAllreduce`, :class:`RoundRecord`,
:func:`majority_initiator`, :class:`PartialCollectiveError`, :data:`MODES`.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from dlsched.errors import DlschedError

from dlsched.runtime import torchrun
from dlsched.runtime.ps_failures import seconds, transfer_failure

#: The partial collectives (eager-SGD §4.1, §4.2), and ``full``: the same schedule activated by the last
#: process to arrive, i.e. a synchronous all-reduce (the end of the paper's solo–majority–full spectrum).
MODES = ("solo", "majority", "full")


class PartialCollectiveError(DlschedError):
    """A partial all-reduce failed, timed out, or lost a peer."""


def majority_initiator(seed: int, round_: int, world: int) -> int:
    """The initiator of majority round ``round_``: a draw every process makes alike from ``seed``.

    Examples
    --------
    >>> [majority_initiator(7, r, 8) for r in range(6)] == [majority_initiator(7, r, 8) for r in range(6)]
    True
    >>> all(0 <= majority_initiator(1, r, 4) < 4 for r in range(50))
    True
    """
    import numpy as np
    return int(np.random.default_rng([int(seed), int(round_), 0xEA6E]).integers(world))


@dataclass
class RoundRecord:
    """What one executed round carried: its index, the gradients that went in, their staleness (rounds
    between the step and this round, summed), their age (rounds completed between the step's start and this
    round, summed: the version staleness), which processes were fresh, and the initiator. ``woke_s`` is when
    this process's progress thread saw the round activated, ``done_s`` when it completed (seconds after
    the schedule's start)."""

    round: int
    gradients: int
    staleness_sum: int
    age_sum: int
    fresh: list[int]
    initiator: int | None
    votes_agree: bool
    synchronous: bool
    woke_s: float
    done_s: float

    @property
    def nap(self) -> int:
        """Number of active processes: those whose gradient of step ``round`` went in."""
        return sum(self.fresh)


class PartialAllreduce:
    """The persistent schedule of one process for ``rounds`` rounds of a ``numel``-element partial all-reduce.

    Parameters
    ----------
    store, progress_store : torch.distributed.Store
        Two connections to the job's store, shared by every process
        (activation): one for the training loop, one for the progress thread.
    group : ProcessGroup
        A gloo group of all ``world`` processes used by this schedule only.
    rank, world : int
    numel : int
        Elements of the reduced vector (the flattened gradient).
    mode : {"solo", "majority", "full"}
    seed : int
        Shared seed of the majority initiators.
    rounds : int
        How many rounds the schedule runs.
    timeout : float
        Seconds any single wait may take.
    prefix : str
        Namespace of this schedule's store keys.
    sync_every : int
        The limiter: every ``sync_every``-th round is activated as ``full`` (0: never).

    Examples
    --------
    >>> PartialAllreduce(None, None, None, 0, 4, 10, "all", 0, 3, 5.0)
    Traceback (most recent call last):
    ...
    dlsched.hooks.partial_allreduce.PartialCollectiveError: mode must be one of 'solo', 'majority', 'full', got 'all'
    """

    def __init__(self, store, progress_store, group, rank: int, world: int, numel: int, mode: str, seed: int,
                 rounds: int, timeout: float, prefix: str = "eager", sync_every: int = 0):
        if mode not in MODES:
            raise PartialCollectiveError(f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
        if isinstance(sync_every, bool) or not isinstance(sync_every, int) or sync_every < 0:
            raise PartialCollectiveError(f"sync_every must be a whole number of rounds ≥ 0, got {sync_every!r}")
        import torch
        self.store, self.progress_store, self.group = store, progress_store, group
        self.rank, self.world = rank, world
        self.numel, self.mode, self.seed, self.rounds, self.timeout = numel, mode, seed, rounds, timeout
        self.prefix, self.sync_every = prefix, sync_every
        self._send = torch.zeros(numel, dtype=torch.float32)
        self._steps: list[tuple[int, int]] = []  # (step, rounds its model held) of every gradient buffered
        self._cond = threading.Condition()
        self.completed = -1                  # last round finished
        self.latest = None                   # receive buffer: the latest round's summed vector
        self.records: list[RoundRecord] = []
        self.initiated: list[int] = []       # rounds this process activated
        self.activated_s: dict[int, float] = {}  # when it activated them (seconds after the start)
        self.reduced_sum = torch.zeros(numel, dtype=torch.float64)  # every round's sum, for accounting
        self.error: BaseException | None = None
        self.max_staleness = 0               # of the gradients this process contributed
        self.max_age = 0
        self.t0 = time.perf_counter()        # records' times are seconds after this
        self._thread = threading.Thread(target=self._progress, name="dlsched-partial-allreduce", daemon=True)

    @classmethod
    def from_env(cls, numel: int, mode: str, rounds: int, timeout: float, seed: int = 0, sync_every: int = 0,
                 name: str = "partial") -> PartialAllreduce:
        """The schedule of this process in a job launched by ``torchrun``: joins the job (``env://``, if not
        joined yet), opens two connections to its store (keys in ``name``'s namespace of the run) and makes a
        gloo group of all processes for the schedule alone. Every process must call it, in the same order
        relative to its other groups; call :meth:`start` next.

        Raises
        ------
        NotUnderTorchrun, TorchrunError
            Not launched by torchrun, or the job could not be joined.
        PartialCollectiveError
            A bad setting, or the group could not be made within ``timeout``.
        """
        import torch.distributed as dist
        env = torchrun.join(timeout)
        store = torchrun.store_client(env, timeout, name)
        progress = torchrun.store_client(env, timeout, name)
        try:
            group = dist.new_group(backend="gloo", timeout=seconds(timeout))
        except Exception as e:  # noqa: BLE001
            raise PartialCollectiveError(f"rank {env.rank}: making the schedule's group failed "
                                         f"({str(e).splitlines()[0][:300]})") from None
        return cls(store, progress, group, env.rank, env.world_size, numel, mode, seed, rounds, timeout,
                   prefix=name, sync_every=sync_every)

    def start(self, t0: float | None = None) -> None:
        """Start the progress thread; round times are measured from ``t0`` (``time.perf_counter``)."""
        self.t0 = time.perf_counter() if t0 is None else t0
        self._thread.start()

    def _key(self, round_: int) -> str:
        return f"{self.prefix}/act/{round_}"

    # -- the training loop's side ----------------------------------------------------------------

    def round_mode(self, round_: int) -> str:
        """How round ``round_`` is activated: the schedule's mode, or ``full`` on the limiter's rounds (the
        simulator's rule, :func:`~dlsched.analyses.allreduce_sim.synchronous_round`)."""
        from dlsched.analyses.allreduce_sim import synchronous_round
        return "full" if synchronous_round(self.mode, round_, self.sync_every) else self.mode

    def arrive(self, step: int, grad, version: int | None = None) -> None:
        """Put the gradient of ``step`` into the send buffer and activate round ``step`` if this process may.

        ``version``: how many rounds the model that computed ``grad`` held
        (the latest round applied + 1); by default ``step``, an up-to-date model.
        """
        with self._cond:
            self._send += grad.to(self._send.dtype)
            self._steps.append((step, step if version is None else version))
            done = self.completed >= step
        if done or step >= self.rounds:
            return  # round already ran: this gradient goes into the next one
        mode = self.round_mode(step)
        try:
            t = time.perf_counter() - self.t0
            if mode == "solo":
                first = self.store.add(self._key(step), 1) == 1
            elif mode == "majority":
                first = majority_initiator(self.seed, step, self.world) == self.rank
                if first:
                    self.store.add(self._key(step), 1)
            else:
                first = self.store.add(f"{self.prefix}/arrived/{step}", 1) == self.world  # full: the last one
                if first:
                    self.store.add(self._key(step), 1)
        except Exception as e:  # the store lives in rank 0: it is gone or stalled
            raise transfer_failure(f"rank {self.rank}: activating round {step} failed", e) from None
        if first:
            self.initiated.append(step)
            self.activated_s[step] = t

    def wait_round(self, step: int):
        """Wait until round ``step`` is complete; return ``(r, summed vector)`` of the latest round ``r``."""
        deadline = time.monotonic() + self.timeout
        with self._cond:
            while self.completed < step and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PartialCollectiveError(
                        f"rank {self.rank}: round {step} of the {self.mode} all-reduce did not complete within "
                        f"{self.timeout:g} s; a peer process probably stalled")
                self._cond.wait(min(left, 0.5))
            if self.error is not None:
                raise self.error
            return self.completed, self.latest

    def queued(self):
        """``(vector, count)`` of the gradients still waiting in the send buffer."""
        with self._cond:
            return self._send.clone(), len(self._steps)

    def join(self) -> None:
        """Wait for the progress thread to finish its rounds (bounded)."""
        self._thread.join(self.timeout)
        if self.error is not None:
            raise self.error

    # -- the progress thread -----------------------------------------------------------------------

    def _progress(self) -> None:
        try:
            for r in range(self.rounds):
                self._run_round(r)
        except DlschedError as e:
            self.error = e
        except Exception as e:  # noqa: BLE001 - handed to the training loop
            self.error = PartialCollectiveError(f"rank {self.rank}: {type(e).__name__}: {e}")
        with self._cond:
            self._cond.notify_all()

    def _run_round(self, r: int) -> None:
        import torch
        import torch.distributed as dist
        try:
            self.progress_store.wait([self._key(r)], seconds(self.timeout))
        except Exception as e:
            raise transfer_failure(f"rank {self.rank}: round {r} was not activated within {self.timeout:g} s",
                                   e) from None
        woke = time.perf_counter() - self.t0
        p, mode, h = self.world, self.round_mode(r), 3  # h: the head of the tail (count, staleness, age)
        vec = torch.zeros(self.numel + h + 2 * p, dtype=torch.float32)
        with self._cond:
            vec[:self.numel] = self._send
            steps, self._steps = self._steps, []
            self._send.zero_()
        assert all(s <= r and v <= r for s, v in steps), (steps, r)  # no gradient waits for a round before its step
        tail = vec[self.numel:]
        tail[0], tail[1], tail[2] = len(steps), sum(r - s for s, _ in steps), sum(r - v for _, v in steps)
        self.max_staleness = max([self.max_staleness] + [r - s for s, _ in steps])
        self.max_age = max([self.max_age] + [r - v for _, v in steps])
        tail[h + self.rank] = float(any(s == r for s, _ in steps))
        if mode == "majority":
            tail[h + p + majority_initiator(self.seed, r, p)] = 1.0
        try:  # gloo raises at the post, too, when a dead peer closed the connection
            work = dist.all_reduce(vec, group=self.group, async_op=True)
            work.wait(seconds(self.timeout))
        except Exception as e:
            raise transfer_failure(f"rank {self.rank}: round {r} of the {self.mode} all-reduce failed or timed out "
                                   f"after {self.timeout:g} s", e) from None
        tail = vec[self.numel:].round().to(torch.int64).tolist()
        votes = tail[h + p:]
        initiator = max(range(p), key=votes.__getitem__) if mode == "majority" else None
        rec = RoundRecord(r, tail[0], tail[1], tail[2], tail[h:h + p], initiator,
                          votes_agree=mode != "majority" or votes[initiator] == p, synchronous=mode == "full",
                          woke_s=woke, done_s=time.perf_counter() - self.t0)
        with self._cond:
            self.reduced_sum += vec[:self.numel].to(torch.float64)
            self.latest = vec[:self.numel]
            self.records.append(rec)
            self.completed = r
            self._cond.notify_all()
