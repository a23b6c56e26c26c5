"""Data-parallel all-reduce under load imbalance: synchronous, solo and majority (eager-SGD, DESIGN §4.8).

Activation model: **free-running processes** with a background progress
engine and a **persistent schedule** (eager-SGD §4.1, §5, Algorithm 2); there
is no barrier per iteration (``activation="barrier"`` adds one, for the
Fig. 8 micro-benchmark). Every process runs ``T`` steps on its own clock;
step ``j``'s collective runs exactly once. With ``c_p(j) = f_p(j)·e + d_p(j)``
(speed factor, nominal compute ``e``, injected delay)::

    a_p(0) = c_p(0),   a_p(j) = end_p(j−1) + c_p(j)        arrival at collective j
    σ_j = max_p a_p(j)      synchronous all-reduce (everyone is internally activated)
          min_p a_p(j)      solo: the first process to arrive is the initiator
          a_{i_j}(j)        majority: i_j drawn by a generator seeded alike on every process
    end_p(j) = max(a_p(j), done_j)

A process arriving by ``σ_j`` is *active*: its fresh gradient enters
collective ``j`` and it waits for the result. A later one finds the collective
running or done, takes the result when there is one, and goes on; its
gradient waits in its send buffer and enters the next collective that starts
after it (Algorithm 2), so a gradient computed at step ``k`` that enters
collective ``j`` is ``j − k`` steps stale. ``NAP_j = #{p : a_p(j) ≤ σ_j}``
(eager-SGD §7.1's active processes, the initiator included).

The gradients travel in DDP buckets in the order backward produces them; the
bucket ``b`` of process ``p`` is ready at ``r_pb = end_p(j−1) + d_p(j) + f_p(j)·o_b``
(``o_b`` its offset in the step; the last bucket is ready when the process
arrives). Bucket ``b`` is all-reduced from its trigger ``R_b`` on (the latest
``r_pb`` for the synchronous collective, the earliest for solo, the
initiator's for majority); a process not yet there joins on the activation
message, ``⌈log2 P⌉·α`` later, so every process has joined at
``J_b = max_p min(r_pb, R_b + activation)`` (the synchronous collective waits
for every ``r_pb``). Buckets go one at a time, overlapping the rest of
backward: ``start_b = max(end_{b−1}, J_b)``, ``end_b = start_b + cost_b``, and
``done_j`` is the last bucket's end; the next forward waits for it. With no
imbalance every process arrives at once, nobody waits for an activation, and
the three collectives give the same timeline.

A process reads the receive buffer whenever it leaves a collective and sees
only the latest result; a result overwritten before it read it is a
*missed update* (eager-SGD §5: the replicas then drift apart). A gradient's
*lag* is ``j − k``; its *model age* is ``j`` less the rounds the process had
read when step ``k`` began (Lemma 6.1's τ), which does not grow with drift.

A late process that finds collective ``j`` done leaves at its arrival: it
skips the wait ``done_j − σ_j`` (the collective phase), which is how it
recovers a delay. ``StepShape.phase_s`` fixes that phase
(``--collective-phase``); ``sync_every`` makes every N-th round synchronous
(the limiter of the authors' code).

Examples
--------
Four processes skewed 1–4 ms, a free all-reduce:

>>> import numpy as np
>>> shape = StepShape.single(0.0, 0)
>>> delays = np.tile([0.001, 0.002, 0.003, 0.004], (3, 1))
>>> runs = {k: run_collective(k, shape, np.ones((3, 4)), delays, 0.0, 1e9) for k in COLLECTIVES}
>>> [round(runs[k].steps_per_s) for k in COLLECTIVES]
[250, 1000, 300]
>>> runs["solo"].nap.tolist(), runs["allreduce"].nap.tolist()
([1, 1, 1], [4, 4, 4])
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dlsched.errors import DlschedError

from .collective_cost import activation_broadcast, allreduce_cost

#: The collectives compared; ``allreduce`` is the synchronous baseline.
COLLECTIVES = ("allreduce", "solo", "majority")
#: Activation models: training's free-running processes, or a barrier per iteration (micro-benchmarks).
ACTIVATIONS = ("free-running", "barrier")


def parse_collectives(text: str | None) -> list[str] | None:
    """``"allreduce,solo"`` → ``["allreduce", "solo"]``; ``None`` when ``text`` names no collective at all.

    ``simulate --compare`` takes either collectives or transfer orders
    (:func:`dlsched.analyses.compare.parse_orders`); this tells them apart.

    Raises
    ------
    DlschedError
        A list mixing collectives with other names (orders), or naming one twice.

    Examples
    --------
    >>> parse_collectives("allreduce, solo"), parse_collectives("tac,random")
    (['allreduce', 'solo'], None)
    """
    if not text:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    known = [n for n in names if n in COLLECTIVES]
    if not known:
        return None
    if len(known) != len(names):
        other = ", ".join(n for n in names if n not in COLLECTIVES)
        raise DlschedError(f"--compare {text!r} mixes collectives ({', '.join(known)}) with {other}; compare "
                           f"either collectives ({', '.join(COLLECTIVES)}) or transfer orders, not both")
    if len(set(names)) != len(names):
        raise DlschedError(f"--compare {text!r} names a collective twice")
    return names


@dataclass(frozen=True)
class StepShape:
    """One process's training step: ``compute_s`` of forward + backward, and its gradient buckets.

    ``bucket_offsets[b]`` is when bucket ``b`` is ready, in seconds from the
    step's start (non-decreasing, the last one equal to ``compute_s``);
    ``bucket_bytes[b]`` its size.
    """

    compute_s: float
    bucket_offsets: tuple[float, ...]
    bucket_bytes: tuple[int, ...]
    phase_s: float | None = None

    @classmethod
    def single(cls, step_s: float, nbytes: int, phase_s: float | None = None) -> "StepShape":
        """A step of ``step_s`` seconds that all-reduces ``nbytes`` in one piece at its end (``--step-time``).

        With ``phase_s`` (``--collective-phase``) the step is ``step_s − phase_s``
        of compute and a collective phase of ``phase_s`` that the all-reduce
        takes whatever α and β say: the wait a late process skips when it finds
        the collective done, which is how it recovers a delay.

        >>> StepShape.single(0.41, 0, phase_s=0.05).compute_s
        0.36
        """
        if phase_s is None:
            return cls(step_s, (step_s,), (nbytes,))
        compute = round(step_s - phase_s, 15)
        return cls(compute, (compute,), (nbytes,), phase_s)

    @property
    def gradient_bytes(self) -> int:
        return int(sum(self.bucket_bytes))


@dataclass
class CollectiveRun:
    """What :func:`run_collective` found; times in seconds from the start of the run, arrays per step/process."""

    kind: str
    arrival: np.ndarray        # (T, P) a_p(j)
    leave: np.ndarray          # (T, P) end_p(j)
    trigger: np.ndarray        # (T,) σ_j
    done: np.ndarray           # (T,) done_j
    initiator: np.ndarray      # (T,) the process whose arrival is σ_j
    nap: np.ndarray            # (T,) active processes
    entered: np.ndarray        # (T, P) the collective gradient (k, p) entered; T: still queued at the end

    @property
    def steps(self) -> int:
        return len(self.done)

    @property
    def steps_per_s(self) -> float:
        return float(self.steps / self.done[-1]) if self.done[-1] > 0 else math.inf

    @property
    def iteration_s(self) -> np.ndarray:
        """Each process's mean time per step (its last step's end over the steps)."""
        return self.leave[-1] / self.steps

    @property
    def latency_s(self) -> np.ndarray:
        """Time inside each call, ``end_p(j) − a_p(j)`` (Fig. 9's latency)."""
        return self.leave - self.arrival

    @property
    def staleness(self) -> np.ndarray:
        """Steps old of every gradient that entered a collective (0: fresh)."""
        k = np.broadcast_to(np.arange(self.steps)[:, None], self.entered.shape)
        sent = self.entered < self.steps
        return (self.entered - k)[sent]

    @property
    def version(self) -> np.ndarray:
        """``(T, P)``: rounds the model of process ``p`` holds when it starts step ``k``.

        A process reads the receive buffer when it leaves a collective, so its
        model at step ``k`` has every round done by the time it left step
        ``k − 1`` (the latest one's result; the ones overwritten before it are
        the missed updates).
        """
        version = np.zeros(self.entered.shape, dtype=int)
        version[1:] = np.searchsorted(self.done, self.leave[:-1], side="right")
        return version

    @property
    def model_age(self) -> np.ndarray:
        """Version staleness of every gradient that entered a collective: the rounds completed between the
        start of the step that computed it and the round that applies it (0: the model was up to date).

        The index lag (:attr:`staleness`) grows with drift; this does not: it
        is the age of the model the gradient was computed on, Lemma 6.1's τ.
        """
        sent = self.entered < self.steps
        return (self.entered - self.version)[sent]

    @property
    def queued_at_end(self) -> int:
        return int((self.entered >= self.steps).sum())

    @property
    def missed(self) -> int:
        """Results some process never saw: overwritten in the receive buffer before it read it."""
        total = 0
        for p in range(self.leave.shape[1]):
            seen = np.unique(np.searchsorted(self.done, self.leave[:, p], side="right") - 1)
            seen = seen[seen >= 0]
            total += int(seen[-1] + 1 - len(seen)) if len(seen) else 0
        return total

    def figures(self) -> dict:
        """The JSON-able summary printed by ``dlsched simulate --collective``."""
        stale, age = self.staleness, self.model_age
        return {"steps_per_s": self.steps_per_s, "mean_iteration_s": float(self.iteration_s.mean()),
                "iteration_s_per_process": self.iteration_s.tolist(),
                "mean_latency_s": float(self.latency_s.mean()), "mean_nap": float(self.nap.mean()),
                "nap": self.nap.tolist(), "mean_staleness": float(stale.mean()) if len(stale) else 0.0,
                "max_staleness": int(stale.max()) if len(stale) else 0,
                "mean_version_staleness": float(age.mean()) if len(age) else 0.0,
                "max_version_staleness": int(age.max()) if len(age) else 0,
                "missed_rate": self.missed / self.entered.size, "queued_at_end": self.queued_at_end,
                "initiators": self.initiator.tolist()}


def majority_initiators(processes: int, steps: int, seed: int) -> np.ndarray:
    """Majority's initiator of every collective, a stateless draw per round that every process makes alike.

    Round ``j``'s initiator is ``default_rng([seed, j, 0xEA6E]).integers(P)``, the
    draw the real hook (:mod:`dlsched.hooks.partial_allreduce`) makes, so a
    simulation and a real run with one seed have the same initiators.

    >>> majority_initiators(8, 5, seed=1).tolist() == majority_initiators(8, 5, seed=1).tolist()
    True
    """
    return np.array([np.random.default_rng([seed, j, 0xEA6E]).integers(processes) for j in range(steps)], dtype=int)


def synchronous_round(kind: str, j: int, sync_every: int) -> bool:
    """Whether round ``j`` of ``kind`` is synchronous: always for ``allreduce``; for solo and majority every
    ``sync_every``-th round (the limiter of the authors' code: rounds ``N − 1, 2N − 1, …``; 0: never).

    >>> [synchronous_round("solo", j, 3) for j in range(6)]
    [False, False, True, False, False, True]
    """
    return kind == "allreduce" or (sync_every > 0 and (j + 1) % sync_every == 0)


def run_collective(kind: str, shape: StepShape, factors: np.ndarray, delays: np.ndarray, alpha: float,
                   beta: float, algorithm: str = "ring", seed: int = 0,
                   activation: str = "free-running", progress=None, *, sync_every: int = 0,
                   activation_s: float | None = None) -> CollectiveRun:
    """Simulate ``T`` free-running steps of ``P`` processes under one collective (module docstring).

    Parameters
    ----------
    kind : {"allreduce", "solo", "majority"}
    shape : StepShape
    factors, delays : ndarray
        ``T × P`` speed factors and injected delays in seconds (:mod:`.imbalance`).
    alpha, beta : float
        Network latency (s) and bandwidth (bytes/s) of the α–β cost model.
    algorithm : {"ring", "recursive-doubling"}
    seed : int
        Seeds majority's initiators.
    activation : {"free-running", "barrier"}
        ``barrier`` starts every step on every process when the last one has
        left the previous collective, as a micro-benchmark with a barrier per
        iteration does (eager-SGD Fig. 8); ``free-running`` is training.
    sync_every : int
        The limiter: every ``sync_every``-th solo or majority round is
        synchronous (:func:`synchronous_round`); 0, the default, never.
    activation_s : float, optional
        What an activation costs a process that joins late; by default the
        binomial-tree broadcast ``⌈log2 P⌉·α`` (:func:`.activation_broadcast`).

    Raises
    ------
    DlschedError
        An unknown collective, a step of no time, mismatched arrays.
    """
    if activation not in ACTIVATIONS:
        raise DlschedError(f"unknown activation model {activation!r}; choose from {', '.join(ACTIVATIONS)}")
    if kind not in COLLECTIVES:
        raise DlschedError(f"unknown collective {kind!r}; choose from {', '.join(COLLECTIVES)}")
    if not (shape.compute_s > 0 or (delays > 0).all()):
        raise DlschedError("a step must take some time: give a positive step time (or a model whose compute "
                           "the oracle times above zero)")
    T, P = delays.shape
    if factors.shape != (T, P):
        raise DlschedError(f"speed factors of shape {factors.shape} do not match the delays' {delays.shape}")
    if not (isinstance(sync_every, (int, np.integer)) and sync_every >= 0):
        raise DlschedError(f"the limiter's period must be a whole number of rounds ≥ 0, got {sync_every!r}")
    cost = np.array([shape.phase_s] if shape.phase_s is not None else
                    [allreduce_cost(algorithm, P, n, alpha, beta) for n in shape.bucket_bytes])
    act_s = activation_broadcast(P, alpha) if activation_s is None else activation_s
    offsets = np.asarray(shape.bucket_offsets, dtype=float)
    drawn = majority_initiators(P, T, seed) if kind == "majority" else None
    arrival, leave = np.empty((T, P)), np.empty((T, P))
    trigger, done = np.empty(T), np.empty(T)
    initiator, nap = np.empty(T, dtype=int), np.empty(T, dtype=int)
    end = np.zeros(P)
    for j in range(T):
        if progress is not None and j % 512 == 0:
            progress(j)
        start = (end if activation == "free-running" else np.full(P, end.max())) + delays[j]
        ready = start[:, None] + factors[j][:, None] * offsets[None, :]
        a = start + factors[j] * shape.compute_s
        sync = synchronous_round(kind, j, sync_every)
        i = int(np.argmax(a) if sync else np.argmin(a) if kind == "solo" else drawn[j])
        R = ready.max(axis=0) if sync else ready.min(axis=0) if kind == "solo" else ready[i]
        joined = R if sync else np.minimum(ready, R[None, :] + act_s).max(axis=0)
        t = 0.0
        for b in range(len(cost)):
            t = max(t, joined[b]) + cost[b]
        arrival[j], trigger[j], done[j], initiator[j] = a, a[i], t, i
        nap[j] = int((a <= a[i]).sum())
        end = np.maximum(a, t)
        leave[j] = end
    entered = np.stack([np.searchsorted(trigger, arrival[:, p], side="left") for p in range(P)], axis=1)
    return CollectiveRun(kind, arrival, leave, trigger, done, initiator, nap, entered)
