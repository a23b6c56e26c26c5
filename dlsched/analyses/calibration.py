"""The cluster's own compute speed, fitted on its unscored calibration iterations (DESIGN §4.7).

``dlsched validate`` profiles every op for the shape of a step, but on a small
machine the level of a step, how much it slows beside the link's traffic and
how much it varies come from the cluster itself. Each round of the measured
job holds two unscored calibration iterations: one unordered, one in TIC
order. In the unordered one a worker computes mostly after its last parameter
arrived; in the TIC one about half its step runs while its transfers are still
in flight. :func:`compute_split` cuts each worker's busy time into the part
beside its own transfers and the rest and :func:`calibrate_compute` fits level, slow-down and step-to-step
variation to those pairs.

Examples
--------
>>> c = calibrate_compute([(0.0, 1.0), (0.6, 0.5), (0.0, 1.1), (0.66, 0.55), (0.3, 0.75)], profile=1.0)
>>> round(c.overlap, 3), round(c.level, 3), c.identified
(1.2, 1.0, True)
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from dlsched.timeline import compute_spans

from . import intervals as iv

#: Least spread (standard deviation) of the compute beside transfers, as a share of the
#: profile's step, from which the slow-down beside transfers is fitted; below it the
#: calibration iterations hardly computed beside transfers and it stays 1.
MIN_SPREAD = 0.05
#: Largest slow-down fitted (the search's bound), and the steps of ``1/f`` it searches in.
MAX_OVERLAP, GRID = 4.0, 3001


@dataclass
class ComputeCalibration:
    """What the calibration iterations say about the cluster's compute.

    ``level``: the step computed with the link quiet, over the profile's step;
    ``overlap``: how many times slower compute runs while the worker's own
    transfers are in flight (at least 1); ``factors``: each record's quiet
    step over their median (step-to-step variation); ``identified``: whether
    ``overlap`` was fitted (else the records computed too little beside their
    transfers and it is 1).
    """

    level: float
    overlap: float
    factors: list = field(default_factory=list)
    identified: bool = False

    @property
    def records(self) -> int:
        return len(self.factors)


def crowd_factors(workers: int, cores: float, background: float, threads: int = 1) -> list[float]:
    """How many times its profiled time a step's op takes while ``k`` workers compute at once (index ``k − 1``).

    The workers share ``cores`` with ``background`` cores' worth of other
    load (:func:`dlsched.machine.busy_cores`, taken before the job). With
    ``k`` workers of ``threads`` intra-op threads computing, ``k·threads +
    background`` runnable threads share the cores, so each runs ``s(k) =
    max(1, (k·threads + background) / cores)`` times slower than alone. The in-situ oracle profiled each op
    beside the other workers computing (``k = workers``), so the factor is
    ``s(k) / s(workers)``: 1 when all compute, below 1 when some wait.

    On a quiet 2-core machine with 2 workers every factor is 1. Beside a busy
    loop (``background`` ≈ 1) a worker computing alone runs ×1.5 faster than
    two at once: under TIC and TAC the workers compute between waits at
    different moments and both after their last parameter, and a simulator
    running every op at one level put that last, crowded stretch too early
    (transformer training: TIC calibration iterations predicted 2% fast,
    ratio error +0.045; with these factors 0.1% and +0.026).

    Examples
    --------
    >>> crowd_factors(2, 2, 0.0)
    [1.0, 1.0]
    >>> [round(c, 3) for c in crowd_factors(2, 2, 1.0)]
    [0.667, 1.0]
    >>> [round(c, 3) for c in crowd_factors(4, 2, 0.0)]
    [0.5, 0.5, 0.75, 1.0]
    """
    def slowdown(k: int) -> float:
        return max(1.0, (k * max(threads, 1) + max(background, 0.0)) / max(cores, 1))

    return [slowdown(k) / slowdown(workers) for k in range(1, workers + 1)]


def compute_split(record, group: Sequence = (), crowd: Sequence[float] | None = None) -> tuple[float, float]:
    """Seconds one worker computed in one iteration beside its own transfers, and with its link quiet.

    Busy time is compute start to end less the waits that blocked it
    (:func:`~dlsched.timeline.compute_spans`); the worker's transfers are
    in flight from the iteration's start to its last parameter's arrival and
    during each gradient's send, as in the simulator
    (:func:`~dlsched.analyses.multiworker.run_workers`). Given the
    iteration's other records (``group``) and :func:`crowd_factors`, each
    busy second is counted at the pace of ``k = workers`` computing at once:
    divided by ``crowd[k − 1]``, ``k`` being how many of the group's workers
    computed then (this one included).

    Examples
    --------
    >>> from dlsched.timeline import IterationRecord
    >>> r = IterationRecord(0, 0, 0.0, 0.1, 1.0, arrivals={"a": 0.1, "b": 0.6}, compute_end=0.9,
    ...                     stalls=[[0.3, 0.4]], grad_sends={"a": [0.8, 0.85]})
    >>> tuple(round(x, 3) for x in compute_split(r))
    (0.45, 0.25)

    Beside a worker that computed from 0.5 on, with ops alone ×0.5 as long as two at once:

    >>> o = IterationRecord(0, 1, 0.0, 0.5, 1.0, arrivals={"a": 0.5}, compute_end=0.9)
    >>> tuple(round(x, 3) for x in compute_split(r, [r, o], [0.5, 1.0]))
    (0.75, 0.25)
    """
    def merged(spans) -> iv.Intervals:
        return iv.merge([a for a, _ in spans], [b for _, b in spans])

    mine = merged(compute_spans(record))
    transfers = merged([(record.start, record.last_arrival if record.arrivals else record.start),
                        *record.grad_sends.values()])
    others = [merged(compute_spans(r)) for r in group if r is not record] if crowd is not None else []
    cuts = np.unique(np.concatenate([*mine, *transfers, *(x for o in others for x in o)]))
    lo, hi = cuts[:-1], cuts[1:]
    mid = (lo + hi) / 2
    seconds = np.where(iv.inside(mine, mid), hi - lo, 0.0)  # this worker's busy time, cut at every boundary
    if others:  # at the pace of all computing: divided by the factor of the k computing then
        k = 1 + sum(iv.inside(o, mid).astype(int) for o in others)
        seconds = seconds / np.asarray(crowd, dtype=float)[np.minimum(k, len(crowd)) - 1]
    near = iv.inside(transfers, mid)
    return float(seconds[near].sum()), float(seconds[~near].sum())


def calibrate_compute(splits: Sequence[tuple[float, float]], profile: float) -> ComputeCalibration:
    """Fit the cluster's compute level ``c``, slow-down beside transfers ``f`` and step factors ``n_i``.

    Record ``i`` (one worker, one iteration) computed ``X_i`` profiled
    seconds of its step ``P`` beside its transfers and the rest with its link
    quiet, at its own speed ``n_i`` (noise around 1)::

        B_i = n_i·c·f·X_i          (beside its transfers)
        A_i = n_i·c·(P − X_i)      (with its link quiet)
        ⇒  A_i + B_i / f = n_i·c·P

    ``X_i`` differs from record to record (little in unordered iterations,
    about half the step under TIC), so ``1/f`` is the ``k`` that makes the
    quiet-equivalent steps ``q_i = A_i + k·B_i`` vary least: at the true
    ``k``, ``log q_i = log n_i + log c·P`` and any other ``k`` adds the spread
    of the ``X_i``. The variance is taken of ``log q``, not ``q``: ``n_i``
    scales ``A_i`` and ``B_i`` alike, which biases a least-squares line of ``A``
    on ``B`` towards a larger ``f``. Then ``c = median(q)/P`` and
    ``n_i = q_i / median(q)``. ``f`` lies in ``[1, MAX_OVERLAP]`` (noise that
    makes busy compute faster is not a speed-up) and stays 1 when the ``B_i``
    spread by less than :data:`MIN_SPREAD` of ``P``: there is nothing to fit.

    Parameters
    ----------
    splits : sequence of (float, float)
        ``(B_i, A_i)`` per record (:func:`compute_split`).
    profile : float
        The profile's compute per step, ``P`` (seconds).

    Examples
    --------
    Steps of 1 s quiet that run 1.25× slower beside transfers, at speeds 1 and 1.1:

    >>> c = calibrate_compute([(0.0, 1.0), (0.625, 0.5), (0.0, 1.1), (0.6875, 0.55)], profile=0.5)
    >>> round(c.overlap, 3), round(c.level, 3), [round(n, 3) for n in c.factors]
    (1.25, 2.1, [0.952, 0.952, 1.048, 1.048])

    Unordered iterations alone barely compute beside transfers: nothing to fit.

    >>> calibrate_compute([(0.0, 1.0), (0.01, 1.0), (0.0, 1.1)], profile=1.0).identified
    False
    """
    b, a = (np.asarray(v, dtype=float) for v in zip(*splits))
    identified = bool(b.size >= 3 and b.std() >= MIN_SPREAD * profile and ((a + b) > 0).all())
    k = 1.0
    if identified:
        ks = np.linspace(1.0 / MAX_OVERLAP, 1.0, GRID)
        k = float(ks[np.argmin(np.log(a[None, :] + ks[:, None] * b[None, :]).var(axis=1))])
    q = a + k * b
    mid = float(statistics.median(q.tolist()))
    return ComputeCalibration(level=mid / profile, overlap=1.0 / k, factors=(q / mid).tolist(), identified=identified)


def fit_contention(quiet: Sequence[float], beside: Sequence[float], comm: Sequence[float],
                   quiet_comm: float) -> tuple[float, float]:
    """How many times slower compute runs beside a collective, and the collective beside compute: ``(f, g)``.

    ``validate --dp ddp``'s *beside* step (:mod:`dlsched.jobs.ddp_caps_run`,
    on the ranks' envelope: :func:`cluster_contention`): a backward that takes
    ``q`` alone and an all-reduce that takes ``a`` alone (``quiet_comm``) start
    together; beside each other backward takes ``t`` and the all-reduce ``e``.
    While both run, for ``o`` seconds, compute does ``1/f`` of its work per
    second and the collective ``1/g`` of its own (the simulator's
    :class:`~dlsched.analyses.ddp_step.HostCosts`)::

        e ≥ t:  o = t                 (backward ended first)
                f = t / q
                o/g + (e − o) = a    ⇒  g = t / (t + a − e)
        e < t:  o = e                 (the all-reduce ended first)
                g = e / a
                e/f + (t − e) = q    ⇒  f = e / (e + q − t)

    One pair per record (``quiet[i]``, ``beside[i]``, ``comm[i]``: the same
    round's steps); the medians, each within
    ``[1, MAX_OVERLAP]``: a record that gained speed beside the other is noise,
    not a speed-up, and a denominator at or below 0 is a slow-down beyond what
    one record can say.

    Examples
    --------
    Backward of 1 s beside an all-reduce of 2 s alone; backward took 1.2 s and the all-reduce 2.3 s:

    >>> f, g = fit_contention([1.0], [1.2], [2.3], 2.0)
    >>> round(f, 3), round(g, 3)
    (1.2, 1.333)
    """
    fs, gs = [], []
    for q, t, e in zip(quiet, beside, comm):
        if e >= t:
            f = t / q if q > 0 else MAX_OVERLAP
            den = t + quiet_comm - e
            g = t / den if den > 0 else MAX_OVERLAP
        else:
            g, den = e / quiet_comm, e + q - t
            f = e / den if den > 0 else MAX_OVERLAP
        fs.append(min(max(f, 1.0), MAX_OVERLAP))
        gs.append(min(max(g, 1.0), MAX_OVERLAP))
    if not fs:
        return 1.0, 1.0
    return float(statistics.median(fs)), float(statistics.median(gs))


def cluster_contention(quiet_forward, quiet_whole, forward, whole, comm, quiet_comm: float) -> tuple[float, float]:
    """:func:`fit_contention` on the cluster's envelope, the one timeline the simulator has: ``(rounds, ranks)``
    arrays of each rank's forward and forward + backward in the calibration step (``quiet_*``) and in the beside
    step, and its all-reduce from its own forward's end; each timed from the barrier every rank leaves together.

    Per round, the all-reduce starts when the last forward ends (a collective starts when the last rank calls
    it), backward runs until the last rank's ends, and the all-reduce ends when the last rank has it; the quiet
    backward is the calibration step's, from the last forward to the last backward
    (:func:`cluster_phases`). The simulator runs the all-reduce beside that envelope's backward, so ``g`` is
    fitted over the same overlap. Fitted on one rank's own overlap, the collective's slow-down while the other
    ranks still computed was charged to that rank's shorter overlap: with 4 ranks on 2 cores (``vgg_mid``), ``g``
    came out ×1.24–2.55 and the small caps were predicted 13% slow.

    Examples
    --------
    Two ranks: the last forward ends at 1.1 s, the last backward at 2.35 s, the all-reduce at 3.35 s; alone, the
    last backward took 1.0 s after the last forward, and the all-reduce takes 2.0 s:

    >>> q_fwd, q_all = [[1.0, 1.1]], [[2.0, 2.1]]
    >>> fwd, whole, comm = [[1.0, 1.1]], [[2.2, 2.35]], [[2.3, 2.25]]
    >>> tuple(round(x, 3) for x in cluster_contention(q_fwd, q_all, fwd, whole, comm, 2.0))
    (1.25, 1.25)
    """
    qf, qw, fw, wh, cm = (np.asarray(a, dtype=float) for a in (quiet_forward, quiet_whole, forward, whole, comm))
    if qf.size == 0:
        return 1.0, 1.0
    start = fw.max(axis=1)
    return fit_contention(qw.max(axis=1) - qf.max(axis=1), wh.max(axis=1) - start, (fw + cm).max(axis=1) - start,
                          quiet_comm)


def cluster_phases(forward, whole) -> tuple[float, float]:
    """The cluster's forward and backward seconds from ``(rounds, ranks)`` arrays of each rank's forward and
    forward + backward, timed from a common barrier: forward ends when the **last** rank's forward ends (the
    median over rounds of the round's latest), and the step's compute when the last rank's backward ends.

    DDP's first bucket cannot leave before the last rank has it, so the buckets are ready on the cluster's
    envelope, not on any one rank's timeline. The slowest rank's total alone puts the cluster's forward end at
    its own: with 4 ranks on 2 cores the latest forward ended 0.1–0.3 s after that rank's, and a
    communication-bound step came out that much fast.

    Examples
    --------
    >>> tuple(round(x, 3) for x in cluster_phases([[1.0, 1.2], [1.1, 1.0]], [[3.0, 2.9], [3.1, 3.0]]))
    (1.15, 1.9)
    """
    f, w = np.asarray(forward, dtype=float), np.asarray(whole, dtype=float)
    fwd = float(np.median(f.max(axis=1)))
    total = float(np.median(w.max(axis=1)))
    return fwd, max(total - fwd, 0.0)
