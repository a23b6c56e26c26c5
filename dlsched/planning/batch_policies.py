"""Online batch-size policies: re-split the global batch at every iteration boundary (LB-BSP, paper ``002_*``).

A policy is a small object: :meth:`BatchPolicy.initial_sizes` gives the
first iteration's batches, and :meth:`BatchPolicy.next_sizes` turns the last
iteration's per-worker batches ``b_i``, busy times ``t_i`` (each worker's own
compute, *excluding* the wait at the barrier, otherwise every worker's time
is the same) and current readings (``cpu``: share of a core available,
``mem``: fraction of memory used) into the next batches. Every policy keeps
``Σ b_i = X`` and ``0 ≤ b_i ≤ bmax_i`` (DESIGN §5.1).

- ``bsp``: the equal split (water-filled under the caps).
- ``static``: one offline plan (:mod:`dlsched.planning.hetero`), never changed.
- ``lbbsp-cpu``: Algorithm 1, ``b_i ∝ v̂_i`` with speeds predicted by
  :mod:`dlsched.planning.speed_predictors`.
- ``lbbsp-gpu``: Algorithm 2, move ``Δ`` samples from the straggler to the
  leader after the leader has led for ``D`` iterations.

Examples
--------
>>> p = make_policy("lbbsp-cpu", 30, 2, predictor="memoryless")
>>> p.initial_sizes()
[15, 15]
>>> p.next_sizes([15, 15], [1.0, 2.0])
[20, 10]
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from dlsched.errors import DlschedError

from .hetero import equal_split, split_exact, split_proportional
from .speed_predictors import PREDICTORS, make_predictor

POLICIES = ("bsp", "static", "lbbsp-cpu", "lbbsp-gpu")


def _readings(readings, n, key, default):
    if readings is None:
        return np.full(n, default)
    if len(readings) != n:
        raise DlschedError(f"{len(readings)} resource readings for {n} workers")
    return np.array([float(r.get(key, default)) if r is not None else default for r in readings])


class BatchPolicy:
    """Base class: validation and the equal split; subclasses override :meth:`_next`.

    Attributes
    ----------
    name : str
    global_batch : int
        ``X``.
    caps : list of int
        ``bmax_i``.
    warnings : list of str
        Advice for the user, each said once (e.g. a worker that should be removed).
    predicted : numpy.ndarray or None
        The speeds the last :meth:`next_sizes` predicted (``lbbsp-cpu``), samples/s.
    """

    name = "bsp"

    def __init__(self, global_batch: int, workers: int, caps=None):
        if workers < 1:
            raise DlschedError(f"a batch policy needs at least one worker, got {workers}")
        if global_batch < 1:
            raise DlschedError(f"the global batch must be at least 1 sample, got {global_batch}")
        self.global_batch, self.n = int(global_batch), int(workers)
        self.caps = [int(c) for c in caps] if caps is not None else [self.global_batch] * self.n
        if len(self.caps) != self.n:
            raise DlschedError(f"{len(self.caps)} memory caps for {self.n} workers")
        if sum(self.caps) < self.global_batch or min(self.caps) < 0:
            raise DlschedError(f"global batch {self.global_batch} does not fit the workers' largest batches "
                               f"{self.caps} (they add up to {sum(self.caps)})")
        self.warnings: list[str] = []
        self.predicted = None
        self.iteration = 0

    def warn(self, text: str):
        if text not in self.warnings:
            self.warnings.append(text)

    def initial_sizes(self) -> list[int]:
        """The first iteration's batches: the equal split under the caps."""
        return split_proportional(self.global_batch, [1.0] * self.n, self.caps)

    def next_sizes(self, sizes: Sequence[int], times: Sequence[float],
                   readings: Sequence[Mapping[str, float]] | None = None) -> list[int]:
        """The next iteration's batches from the last one's batches, busy times and the current readings.

        Raises
        ------
        DlschedError
            Lists of the wrong length, batches that do not add up to ``X``, or a negative or non-finite time.
        """
        sizes, times = [int(b) for b in sizes], [float(t) for t in times]
        if len(sizes) != self.n or len(times) != self.n:
            raise DlschedError(f"{len(sizes)} batches and {len(times)} times for {self.n} workers")
        if sum(sizes) != self.global_batch:
            raise DlschedError(f"the batches {sizes} add up to {sum(sizes)}, not the global batch {self.global_batch}")
        if any(not math.isfinite(t) or t < 0 for t in times):
            raise DlschedError(f"worker times must be finite and ≥ 0 seconds, got {times}")
        self.iteration += 1
        out = self._next(sizes, times, readings)
        assert sum(out) == self.global_batch and all(0 <= b <= c for b, c in zip(out, self.caps)), out
        return out

    def _next(self, sizes, times, readings):
        return self.initial_sizes()


class BSP(BatchPolicy):
    """Plain BSP: every worker gets ``X / n`` (refuses ``X < n``: a worker with nothing to do is not BSP)."""

    name = "bsp"

    def __init__(self, global_batch, workers, caps=None):
        super().__init__(global_batch, workers, caps)
        if self.global_batch < self.n:
            raise DlschedError(f"bsp splits the global batch equally, and {self.global_batch} samples cannot give "
                               f"each of the {self.n} workers at least one; use a global batch ≥ {self.n}")


class Static(BatchPolicy):
    """One offline split, kept for the whole run.

    From ``static_split`` when given; else from ``curves`` (the exact split
    of :func:`dlsched.planning.hetero.split_exact`); else the first
    iteration runs the equal split and the split proportional to its measured
    speeds is kept from then on (a one-off profiling step).
    """

    name = "static"

    def __init__(self, global_batch, workers, caps=None, static_split=None, curves=None):
        super().__init__(global_batch, workers, caps)
        self.split = None
        if static_split is not None:
            split = [int(b) for b in static_split]
            if len(split) != self.n or sum(split) != self.global_batch or any(
                    not 0 <= b <= c for b, c in zip(split, self.caps)):
                raise DlschedError(f"the static split {split} must have {self.n} batches within the caps "
                                   f"adding up to {self.global_batch}")
            self.split = split
        elif curves is not None:
            self.split = split_exact(self.global_batch, curves, self.caps)

    def initial_sizes(self):
        return list(self.split) if self.split is not None else super().initial_sizes()

    def _next(self, sizes, times, readings):
        if self.split is None:
            speeds = [b / t if b > 0 and t > 0 else 0.0 for b, t in zip(sizes, times)]
            known = [v for v in speeds if v > 0]
            floor = min(known) * 1e-3 if known else 1.0
            self.split = split_proportional(self.global_batch, [max(v, floor) for v in speeds], self.caps)
        return list(self.split)


class LBBSPCpu(BatchPolicy):
    """Algorithm 1: ``b_i^k = X·v̂_i^k / Σ_j v̂_j^k`` with ``v_i^{k−1} = b_i^{k−1} / t_i^{k−1}``.

    A worker never measured (batch 0 so far) is predicted at the slowest
    measured speed, so it gets a small share and is measured next time.
    """

    name = "lbbsp-cpu"

    def __init__(self, global_batch, workers, caps=None, predictor="ema", seed=0, **options):
        super().__init__(global_batch, workers, caps)
        self.predictor = make_predictor(predictor, workers, seed=seed, **options)

    def _next(self, sizes, times, readings):
        v_prev = np.array([b / t if b > 0 and t > 0 else np.nan for b, t in zip(sizes, times)])
        cpu, mem = _readings(readings, self.n, "cpu", 1.0), _readings(readings, self.n, "mem", 0.0)
        v_hat = self.predictor.step(v_prev, cpu, mem)
        self.predicted = v_hat.copy()
        ok = np.isfinite(v_hat) & (v_hat > 0)
        if not ok.any():
            return list(sizes)
        v_hat = np.where(ok, v_hat, v_hat[ok].min())
        return split_proportional(self.global_batch, list(v_hat), self.caps)


class LBBSPGpu(BatchPolicy):
    """Algorithm 2: leader/straggler stepping with a fast-approach and a fine-tune phase.

    At each boundary the leader is the fastest worker whose memory use is at
    most ``mem_limit`` (0.95) and the straggler the slowest. If the leader's
    time was below the straggler's in each of the last ``D`` iterations,
    ``Δ`` samples move from the straggler to the leader (fewer if the
    leader's cap is closer). Otherwise, if the leader was ever slower than
    the straggler (an oscillation), the phase switches once from fast-approach
    (``Δ = 5``, ``D = 5``) to fine-tune (``Δ = 1``, ``D = 20``). A straggler
    whose batch is already ``≤ Δ`` is left as it is, with a warning that it
    should be removed.

    Two departures from the paper's listing:

    - in the fast-approach phase a straggler with ``fine_delta < b ≤ Δ``
      samples switches to fine-tune instead of being declared removable (the
      5-sample step is too coarse for it, the worker is not necessarily too
      slow); the warning comes when the straggler has ``≤ Δ`` in fine-tune;
    - ``settle=True`` stops the fine-tune phase from cycling around the
      optimum: the step goes to the fastest worker (the leader first) that has
      led the straggler for ``D`` iterations and whose own time at the bigger
      batch, when it ran that batch (within the last ``memory`` boundaries if
      given), was below the straggler's time now (a batch it never ran is tried); when
      none qualifies, nothing moves. A worker whose time at a batch it ran
      before moves by more than ``relearn`` (10%) has changed speed: what it
      did at other batches is forgotten. ``settle=False`` is the listing as
      written, which keeps stepping between the optimum and a neighbour.
    """

    name = "lbbsp-gpu"

    def __init__(self, global_batch, workers, caps=None, delta=5, window=5, fine_delta=1, fine_window=20,
                 mem_limit=0.95, settle=True, relearn=0.1, memory=None):
        super().__init__(global_batch, workers, caps)
        self.delta, self.window, self.fine_delta, self.fine_window = delta, window, fine_delta, fine_window
        self.mem_limit, self.settle, self.relearn, self.memory = mem_limit, settle, relearn, memory
        self.phase = "fast-approach"
        self.fine_since = None   # the boundary at which fine-tune began
        self.history: list[np.ndarray] = []
        # per worker: batch → (its last time there, the boundary it was seen at)
        self.seen: list[dict[int, tuple[float, int]]] = [dict() for _ in range(self.n)]
        self.moves: list[tuple[int, int, int, int]] = []  # (boundary, straggler, leader, samples)

    def _next(self, sizes, times, readings):
        t = np.asarray(times, dtype=float)
        self.history.append(t)
        for i, (b, ti) in enumerate(zip(sizes, times)):
            if b > 0:
                old = self.seen[i].get(b)
                if old is not None and abs(ti - old[0]) > self.relearn * old[0]:
                    self.seen[i].clear()  # its curve changed: what it did at other batches no longer holds
                self.seen[i][b] = (ti, self.iteration)
        mem = _readings(readings, self.n, "mem", 0.0)
        active = [i for i in range(self.n) if sizes[i] > 0]
        eligible = [i for i in active if mem[i] <= self.mem_limit and sizes[i] < self.caps[i]]
        out = list(sizes)
        if not eligible or len(active) < 2:
            return out
        leader = min(eligible, key=lambda i: (t[i], i))
        straggler = max(active, key=lambda i: (t[i], -i))
        if leader == straggler:
            return out
        if sizes[straggler] <= self.delta:
            if self.phase == "fast-approach" and sizes[straggler] > self.fine_delta:
                self._fine_tune()  # the fast step is too big for this straggler, not the worker too slow
                return out
            self.warn(f"worker {straggler} should be removed: it is the straggler with only {sizes[straggler]} "
                      f"samples (≤ the step {self.delta}), and the others are faster without it")
            return out
        window = self.history[-self.window:]

        def led(i):
            return len(window) >= self.window and all(h[i] < h[straggler] for h in window)

        receiver = leader if led(leader) else None
        if receiver is not None and self.settle and self.phase == "fine-tune":
            # the leader first, then the next fastest: the first whose time after the step stays below the straggler's
            receiver = next((i for i in sorted(eligible, key=lambda i: (t[i], i))
                             if i != straggler and led(i) and self._improves(i, sizes, t, t[straggler])), None)
            if receiver is None:
                return out
        if receiver is not None:
            step = min(self.delta, self.caps[receiver] - sizes[receiver])
            out[receiver] += step
            out[straggler] -= step
            self.moves.append((self.iteration, straggler, receiver, step))
        elif self.phase == "fast-approach" and any(h[leader] > h[straggler] for h in self.history):
            self._fine_tune()
        return out

    def _improves(self, i, sizes, t, limit):
        """Worker ``i``'s time after ``Δ`` more samples stays below ``limit``, by its own time at that batch
        when it ran it; a batch it never ran (or not in the last ``memory`` boundaries, when given) is tried."""
        b, step = sizes[i], min(self.delta, self.caps[i] - sizes[i])
        then = self.seen[i].get(b + step)
        if then is None or (self.memory is not None and self.iteration - then[1] > self.memory):
            return True
        # strictly below (a relative 1e-9): handing a sample between twins changes nothing and would cycle
        return then[0] < limit * (1 - 1e-9)

    def _fine_tune(self):
        self.phase, self.delta, self.window = "fine-tune", self.fine_delta, self.fine_window
        self.fine_since = self.iteration


def make_policy(name: str, global_batch: int, workers: int, *, caps=None, predictor="ema", static_split=None,
                seed=0, **options) -> BatchPolicy:
    """A batch-size policy by name: ``bsp``, ``static``, ``lbbsp-cpu`` or ``lbbsp-gpu``.

    Parameters
    ----------
    name : str
    global_batch : int
        ``X``.
    workers : int
    caps : sequence of int, optional
        ``bmax_i`` (default: ``X`` each).
    predictor : {"memoryless", "ema", "narx"}
        ``lbbsp-cpu``'s speed predictor.
    static_split : sequence of int, optional
        ``static``'s split (else from ``curves=`` or the first iteration's speeds).
    seed : int
        NARX's initial weights and mini-batches.
    **options
        Passed to the policy (``lbbsp-gpu``: ``delta``, ``window``, ``settle`` ...; ``static``: ``curves``;
        ``lbbsp-cpu``: the predictor's options).

    Raises
    ------
    DlschedError
        An unknown name or predictor, ``X < 1``, ``X`` above the caps' sum, or ``X < n`` under ``bsp``.

    Examples
    --------
    >>> make_policy("bsp", 10, 3).initial_sizes()
    [4, 3, 3]
    >>> make_policy("lbbsp-gpu", 60, 2, caps=[40, 40]).initial_sizes()
    [30, 30]
    """
    if name == "bsp":
        return BSP(global_batch, workers, caps, **options)
    if name == "static":
        return Static(global_batch, workers, caps, static_split=static_split, **options)
    if name == "lbbsp-cpu":
        if predictor not in PREDICTORS:
            raise DlschedError(f"unknown speed predictor {predictor!r}; choose one of {', '.join(PREDICTORS)}")
        return LBBSPCpu(global_batch, workers, caps, predictor=predictor, seed=seed, **options)
    if name == "lbbsp-gpu":
        return LBBSPGpu(global_batch, workers, caps, **options)
    raise DlschedError(f"unknown batch policy {name!r}; choose one of {', '.join(POLICIES)}")
