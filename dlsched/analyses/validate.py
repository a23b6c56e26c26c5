"""Predicted against measured: the figures of one order's real run beside its simulation (DESIGN §4.7).

Pure functions over data: the measured side comes from a parameter-server
run's :class:`~dlsched.timeline.Timeline` (per iteration: the span from
the previous iteration's end to its last worker's end, and each worker's
makespan), the predicted side from
:func:`~dlsched.analyses.multiworker.simulate_workers` with the in-situ oracle.
:func:`replay_iteration` rates one measured iteration by replaying the transfer
order its servers really sent through the simulator (TicTac §6.2, Fig. 12a),
and :func:`fit_line` is the least-squares line of that figure.
:func:`ratio_interval` and :func:`ratio_error_interval` bootstrap the
uncertainty of a throughput ratio and of its prediction error, and
:func:`ratio_verdict` rates that error against the ±0.05 target.

Examples
--------
>>> s = iteration_stats([1.0, 1.2, 1.1, 0.9])
>>> round(s["mean"], 3), round(s["p95"], 3)
(1.05, 1.185)
>>> round(relative_error(1.1, 1.0), 3)
0.1
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from dlsched.dag import Graph

RATIO_TARGET = 0.05  # the predicted ratio is checked to ± this of the measured one (DESIGN §4.7)
RATIO_LEVEL = 0.95
RATIO_RESAMPLES = 2000


def iteration_stats(values: Sequence[float]) -> dict:
    """Mean, p50, p95, min and max of per-iteration values (``numpy.percentile``, linear)."""
    v = np.asarray(list(values), dtype=float)
    if v.size == 0:
        return {"mean": math.nan, "p50": math.nan, "p95": math.nan, "min": math.nan, "max": math.nan}
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)),
            "min": float(v.min()), "max": float(v.max())}


def sample_p95(values: Sequence[float], n: int, resamples: int = 2000, seed: int = 0) -> float:
    """The p95 a run of ``n`` iterations would show: the mean of ``numpy.percentile(·, 95)`` over ``resamples``
    draws of ``n`` of ``values`` (with replacement, seeded).

    A measured p95 of 20 iterations lies between the 19th and 20th of them,
    near the distribution's 90th percentile; the p95 of the many predicted
    iterations is the 95th. Compared as they are, a tail makes the prediction
    look 15–25% slow (TAC inference at ``validate``'s defaults); this is the
    same statistic on the predicted side.

    Examples
    --------
    >>> xs = list(range(1, 401))
    >>> round(sample_p95(xs, 400) / 380, 2), round(sample_p95(xs, 20) / 380, 2)
    (1.0, 0.95)
    >>> sample_p95([2.0] * 5, 3)
    2.0
    """
    v = np.asarray(list(values), dtype=float)
    if v.size == 0 or n < 1:
        return math.nan
    draws = v[np.random.default_rng(seed).integers(0, v.size, size=(resamples, n))]
    return float(np.percentile(draws, 95, axis=1).mean())


def relative_error(predicted: float, measured: float) -> float:
    """``(predicted − measured) / measured``: positive when the prediction is too slow."""
    return (predicted - measured) / measured if measured else math.nan


def measured_iterations(timeline, skip: int = 0) -> list[dict]:
    """Per kept iteration of a real run: ``iteration``, ``iteration_time`` and ``straggler_share``.

    The iteration time is the span from the previous iteration's end (the
    first iteration: its earliest worker's start) to its latest worker's end
    (:meth:`~dlsched.timeline.Timeline.iteration_spans`); the straggler share is ``(max_i m_i − min_i m_i) /
    max_i m_i`` over the workers' makespans ``m_i`` from that common start.

    Examples
    --------
    >>> from dlsched.timeline import IterationRecord, Timeline
    >>> t = Timeline([IterationRecord(0, 0, 0.0, 0.1, 1.0), IterationRecord(1, 0, 0.0, 0.1, 0.8)])
    >>> measured_iterations(t)
    [{'iteration': 0, 'iteration_time': 1.0, 'straggler_share': 0.19999999999999996}]
    """
    out = []
    for span in timeline.iteration_spans(skip=skip):
        m = list(span["makespans"].values())
        out.append({"iteration": span["iteration"], "iteration_time": span["end"] - span["start"],
                    "straggler_share": (max(m) - min(m)) / max(m) if max(m) > 0 else 0.0})
    return out


def observed_priorities(record) -> dict[str, int]:
    """The transfer order one worker's servers really sent in one iteration, as priorities.

    Each parameter's priority is its place in its server's send order (the
    simulator ranks transfers per link, so places on different servers never
    compete).

    Examples
    --------
    >>> from dlsched.timeline import IterationRecord
    >>> observed_priorities(IterationRecord(0, 0, 0, 0, 1, sent_order={0: ["b", "a"], 1: ["c"]}))
    {'b': 0, 'a': 1, 'c': 0}
    """
    return send_places(record.sent_order.values())


def send_places(orders: Iterable[Sequence[str]]) -> dict[str, int]:
    """Each parameter's place in its server's send order, given each server's order: the priorities the
    simulator ranks one worker's transfers by (per link, so places on different servers never compete).

    >>> send_places([["b", "a"], ["c"]])
    {'b': 0, 'a': 1, 'c': 0}
    """
    return {n: i for order in orders for i, n in enumerate(order)}


def replay_iteration(graph: Graph, times: Mapping[str, float], priorities: Sequence[Mapping[str, int]],
                     sharing: str, overlap: float = 1.0, crowd: Sequence[float] | None = None) -> list[float]:
    """Simulate one iteration in which worker ``w`` enforces ``priorities[w]``; returns each worker's makespan.

    ``overlap``: compute beside the worker's own transfers runs that many times
    slower; ``crowd``: compute while ``k`` workers compute at once runs
    ``crowd[k − 1]`` times its time (see :func:`~dlsched.analyses.multiworker.run_workers`).

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(20, 6, seed=3)
    >>> order = {r.name: i for i, r in enumerate(g.recvs())}
    >>> spans = replay_iteration(g, t, [order, order], "fair")
    >>> len(spans), spans[0] == spans[1]
    (2, True)
    """
    from .multiworker import run_workers
    from .simulate import compile_graph, transfer_ranks

    sg = compile_graph(graph, times)
    ranks = [transfer_ranks(sg, p, 0, "canonical") for p in priorities]
    _, end = run_workers(sg, [sg.dur] * len(ranks), ranks, list(range(len(ranks))), sharing, overlap=overlap,
                         crowd=crowd)
    return [max(e, default=0.0) for e in end]


class Predicted:
    """Simulated iterations of :func:`predict_iterations`: ``per_iteration`` has ``iteration_time``
    and ``straggler_share`` per iteration (the columns :func:`compare_order` reads)."""

    def __init__(self, per_iteration):
        self.per_iteration = per_iteration


def predict_iterations(graph: Graph, times: Mapping[str, float], workers: int,
                       priorities: Mapping[str, int] | None, iterations: int, sharing: str,
                       compute_factors: Sequence[Sequence[float]] = ((1.0,),), seed: int = 0,
                       overlap: float = 1.0, sent: Sequence[Sequence[Mapping[str, int]]] | None = None,
                       crowd: Sequence[float] | None = None) -> Predicted:
    """Simulate ``iterations`` synchronous iterations in which each worker's compute is scaled per iteration.

    ``compute_factors`` holds rows, one per measured iteration, of each
    worker's step over the median step (:func:`~dlsched.analyses.calibration.calibrate_compute`).
    Each predicted iteration draws one row (seeded) and worker ``w`` runs
    every compute op ``row[w]`` times its oracle time, so that the slowest
    worker, which ends a synchronous iteration, is as slow as it really is, and
    workers that slowed each other down (two steps at once on shared cores)
    stay together. A row of another length than ``workers`` is sampled with
    replacement. Without ``priorities`` every worker draws its own random
    transfer order per iteration, or, given ``sent`` (per iteration of a
    real unordered run, each worker's priorities), predicted iteration ``i``
    runs the orders of ``sent[i mod len(sent)]``: a run's 20 unordered
    iterations are 20 draws of the permutations, and their luck is then the
    prediction's too. Compute beside the worker's own transfers runs
    ``overlap`` times slower, and compute while ``k`` workers compute at
    once ``crowd[k − 1]`` times. ``per_iteration`` also holds what each
    iteration drew: ``row`` (of ``compute_factors``) and ``pair`` (of
    ``sent``, or −1), for :func:`ratio_intervals`.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(20, 6, seed=3)
    >>> p = predict_iterations(g, t, 2, None, 4, "fair", [[0.9, 1.2], [1.0, 1.0]])
    >>> len(p.per_iteration), bool((p.per_iteration["iteration_time"] > 0).all())
    (4, True)
    """
    import pandas as pd

    from .multiworker import run_workers
    from .simulate import compile_graph, transfer_ranks

    sg = compile_graph(graph, times)
    rng = np.random.default_rng(seed)
    on_compute = np.array([sg.resources[k].startswith("compute") for k in sg.res])
    base = np.asarray(sg.dur, dtype=float)
    fixed = transfer_ranks(sg, priorities, 0, "canonical") if priorities is not None else None
    rows = []
    pairs = [[transfer_ranks(sg, p, 0, "canonical") for p in ps] for ps in sent] if sent and fixed is None else []
    for it in range(iterations):
        k = int(rng.integers(len(compute_factors)))
        row = np.asarray(compute_factors[k], dtype=float)
        f = row if row.size == workers else rng.choice(row, size=workers)
        durs = [np.where(on_compute, base * fw, base).tolist() for fw in f]
        pair = it % len(pairs) if pairs else -1
        ranks = (pairs[pair] if pairs else
                 [fixed if fixed is not None else transfer_ranks(sg, None, int(rng.integers(2 ** 31)), "random")
                  for _ in range(workers)])
        _, end = run_workers(sg, durs, ranks, [(w - it) % workers for w in range(workers)], sharing,
                              overlap=overlap, crowd=crowd)
        spans = [max(e, default=0.0) for e in end]
        slow = max(spans)
        rows.append({"iteration": it, "iteration_time": slow,
                     "straggler_share": (slow - min(spans)) / slow if slow > 0 else 0.0, "row": k, "pair": pair})
    return Predicted(pd.DataFrame(rows))


def fit_line(x: Sequence[float], y: Sequence[float]) -> dict:
    """Least-squares line ``y = slope·x + intercept`` and its coefficient of determination ``r2``.

    Examples
    --------
    >>> f = fit_line([0, 1, 2, 3], [1.0, 0.9, 0.8, 0.7])
    >>> round(f["slope"], 3), round(f["intercept"], 3), round(f["r2"], 3)
    (-0.1, 1.0, 1.0)
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    dx = xs - xs.mean() if xs.size else xs
    sxx = float((dx ** 2).sum())
    if xs.size < 2 or not sxx > 0:
        return {"slope": math.nan, "intercept": math.nan, "r2": math.nan, "points": int(xs.size)}
    slope = float((dx * (ys - ys.mean())).sum()) / sxx
    intercept = float(ys.mean() - slope * xs.mean())
    resid = ys - (slope * xs + intercept)
    total = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / total if total > 0 else math.nan
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2, "points": int(xs.size)}


def compare_order(measured: Sequence[dict], predicted) -> dict:
    """One order's table row: measured and predicted mean/p95 iteration time, errors, straggler share.

    Parameters
    ----------
    measured : list of dict
        :func:`measured_iterations` of the real run.
    predicted : MultiWorkerResult or Predicted
        The simulation of the same configuration.

    Examples
    --------
    >>> from dlsched.analyses.multiworker import simulate_workers
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(20, 6, seed=3)
    >>> sim = simulate_workers(g, t, workers=2, iterations=3)
    >>> m = [{"iteration": i, "iteration_time": sim.per_iteration["iteration_time"][i] * 1.1,
    ...       "straggler_share": 0.0} for i in range(3)]
    >>> round(compare_order(m, sim)["mean_error"], 3)
    -0.091
    """
    mt = iteration_stats(r["iteration_time"] for r in measured)
    pt = iteration_stats(predicted.per_iteration["iteration_time"])
    if len(measured) < len(predicted.per_iteration):  # the p95 a run as long as the measured one would show
        pt["p95"] = sample_p95(predicted.per_iteration["iteration_time"], len(measured))
    ms = iteration_stats(r["straggler_share"] for r in measured)
    ps = iteration_stats(predicted.per_iteration["straggler_share"])
    return {"measured_mean": mt["mean"], "predicted_mean": pt["mean"],
            "mean_error": relative_error(pt["mean"], mt["mean"]),
            "measured_p95": mt["p95"], "predicted_p95": pt["p95"], "p95_error": relative_error(pt["p95"], mt["p95"]),
            "measured_straggler": ms["mean"], "predicted_straggler": ps["mean"], "iterations": len(measured)}


def add_throughput_ratios(rows: dict[str, dict], baseline: str = "random") -> None:
    """Add ``measured_ratio`` and ``predicted_ratio`` (throughput over ``baseline``'s) to every row, in place.

    Examples
    --------
    >>> rows = {"random": {"measured_mean": 1.2, "predicted_mean": 1.0},
    ...         "tac": {"measured_mean": 1.0, "predicted_mean": 0.8}}
    >>> add_throughput_ratios(rows); round(rows["tac"]["measured_ratio"], 2), rows["tac"]["ratio_error"]
    (1.2, 0.050000000000000044)
    """
    if baseline not in rows:
        return
    base = rows[baseline]
    for row in rows.values():
        row["measured_ratio"] = base["measured_mean"] / row["measured_mean"]
        row["predicted_ratio"] = base["predicted_mean"] / row["predicted_mean"]
        row["ratio_error"] = row["predicted_ratio"] - row["measured_ratio"]


@dataclass(frozen=True)
class PredictedSample:
    """Predicted iteration times and what each one drew (:func:`predict_iterations`'s ``row`` and ``pair``).

    ``rows[i]``: the calibration row (of ``n_rows``, one per calibration
    round) iteration ``i`` drew its compute factors from; ``pairs[i]``: the
    measured baseline iteration whose transfer orders it ran. Either may be
    ``None``: nothing drawn.
    """

    times: Sequence[float]
    rows: Sequence[int] | None = None
    n_rows: int = 0
    pairs: Sequence[int] | None = None

    @classmethod
    def of(cls, sample) -> "PredictedSample":
        """``sample`` itself, or plain iteration times as a sample that drew nothing."""
        return sample if isinstance(sample, PredictedSample) else cls(list(sample))

    @classmethod
    def from_frame(cls, per_iteration, n_rows: int) -> "PredictedSample":
        """From :func:`predict_iterations`'s ``per_iteration`` (``pair`` −1: no pair)."""
        pairs = per_iteration["pair"].tolist()
        return cls(per_iteration["iteration_time"].tolist(), per_iteration["row"].tolist(), n_rows,
                   pairs if min(pairs, default=-1) >= 0 else None)


def _counts(idx: np.ndarray, n: int) -> np.ndarray:
    """Per resample (row of ``idx``), how many times each of ``0 … n−1`` was drawn."""
    out = np.zeros((idx.shape[0], n))
    np.add.at(out, (np.arange(idx.shape[0])[:, None], idx), 1.0)
    return out


def _resampled_means(sample: PredictedSample, idx: np.ndarray, rounds: dict, base_counts) -> np.ndarray:
    """Each resample's mean of ``sample`` drawn at ``idx``, its iterations weighted by how often their
    calibration round (``rounds[n_rows]``) and their paired measured iteration (``base_counts``) were drawn."""
    x = np.asarray(sample.times, dtype=float)
    if sample.rows is None and sample.pairs is None:
        return x[idx].mean(axis=1)
    # paired: drawing the measured iterations draws their orders' predictions, all of them
    w = np.ones((idx.shape[0], x.size)) if sample.pairs is not None else _counts(idx, x.size)
    if sample.rows is not None:
        w *= rounds[sample.n_rows][:, np.asarray(sample.rows)]
    if sample.pairs is not None:
        w *= base_counts[:, np.asarray(sample.pairs)]
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, w @ x / np.where(total > 0, total, 1.0), math.nan)


def _resampled_ratios(base_times: Sequence[float], times: Sequence[float], rng: np.random.Generator,
                      resamples: int) -> np.ndarray:
    """``mean(base*) / mean(times*)`` for ``resamples`` resamples, each sample drawn with replacement on its own."""
    b, t = np.asarray(base_times, dtype=float), np.asarray(times, dtype=float)
    if b.size == 0 or t.size == 0:
        return np.full(resamples, math.nan)
    bi = rng.integers(0, b.size, size=(resamples, b.size))
    ti = rng.integers(0, t.size, size=(resamples, t.size))
    return b[bi].mean(axis=1) / t[ti].mean(axis=1)


def _percentiles(values: np.ndarray, level: float) -> list[float]:
    """The central ``level`` interval ``[lo, hi]`` of ``values`` (``numpy.percentile``, linear), NaN if more
    than 1% of them are (a resample that drew no predicted iteration at all is dropped)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0 or np.isnan(values).mean() > 0.01:
        return [math.nan, math.nan]
    values = values[~np.isnan(values)]
    lo, hi = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    return [float(lo), float(hi)]


def ratio_interval(base_times: Sequence[float], times: Sequence[float], level: float = RATIO_LEVEL,
                   resamples: int = RATIO_RESAMPLES, seed: int = 0) -> list[float]:
    """Percentile bootstrap interval ``[lo, hi]`` of ``mean(base_times) / mean(times)``.

    With 20 iterations per order the ratio's sampling spread is a few
    hundredths, as large as the ±0.05 it is checked to, so it is shown beside
    it. Each resample draws the iterations of each sample with replacement,
    independently of the other sample; the same ``seed`` gives the same interval.

    Examples
    --------
    >>> lo, hi = ratio_interval([1.0, 1.1, 0.9, 1.0], [0.8, 0.82, 0.78, 0.8])
    >>> bool(lo <= 1.25 <= hi), round(hi - lo, 2)
    (True, 0.19)
    >>> ratio_interval([1.0, 1.0], [0.5, 0.5])
    [2.0, 2.0]
    """
    return _percentiles(_resampled_ratios(base_times, times, np.random.default_rng(seed), resamples), level)


def ratio_intervals(measured_base: Sequence[float], measured: Sequence[float], predicted_base, predicted,
                    level: float = RATIO_LEVEL, resamples: int = RATIO_RESAMPLES, seed: int = 0) -> dict:
    """Percentile bootstrap intervals of the measured ratio, the predicted one, and the predicted less the measured.

    Each resample draws every sample's iterations with replacement. A
    predicted sample (:class:`PredictedSample`) that says what its
    iterations drew is also weighted by a resample of the calibration rounds
    (every predicted sample with the same ``n_rows`` the same one: the
    rounds gave the baseline's factors and the order's together), so the
    interval holds the prediction's own sampling, not only the simulator's;
    and, paired with the measured baseline, by how often each measured
    baseline iteration was drawn: a measured unordered iteration and the
    predictions of its transfer orders go in and out of a resample together,
    and the orders' luck, shared by both, leaves the error. Plain sequences
    are drawn alone; the measured ratios are those of :func:`ratio_interval`
    with the same ``seed``.

    Returns ``{"measured": [lo, hi], "predicted": [lo, hi], "error": [lo, hi]}``.

    Examples
    --------
    A prediction that ran each measured baseline iteration's orders: the
    orders' spread (0.9 to 1.3 s) leaves the error's interval.

    >>> base = [0.9, 1.3, 1.0, 1.2]
    >>> pb = PredictedSample([t + 0.01 for t in base] * 2, pairs=[0, 1, 2, 3] * 2)
    >>> out = ratio_intervals(base, [0.8] * 4, pb, [0.8] * 8)
    >>> [round(x, 4) for x in out["error"]], out["measured"][1] - out["measured"][0] > 0.3
    ([0.0125, 0.0125], True)
    """
    rng = np.random.default_rng(seed)
    mb, m = np.asarray(measured_base, dtype=float), np.asarray(measured, dtype=float)
    pb, p = PredictedSample.of(predicted_base), PredictedSample.of(predicted)
    if min(mb.size, m.size, len(pb.times), len(p.times)) == 0:
        nan = [math.nan, math.nan]
        return {"measured": nan, "predicted": nan, "error": nan}
    bi = rng.integers(0, mb.size, size=(resamples, mb.size))
    ti = rng.integers(0, m.size, size=(resamples, m.size))
    pbi = rng.integers(0, len(pb.times), size=(resamples, len(pb.times)))
    pti = rng.integers(0, len(p.times), size=(resamples, len(p.times)))
    rounds = {n: _counts(rng.integers(0, n, size=(resamples, n)), n)
              for n in sorted({s.n_rows for s in (pb, p) if s.rows is not None})}
    base_counts = _counts(bi, mb.size) if pb.pairs is not None or p.pairs is not None else None
    measured_r = mb[bi].mean(axis=1) / m[ti].mean(axis=1)
    predicted_r = (_resampled_means(pb, pbi, rounds, base_counts) / _resampled_means(p, pti, rounds, base_counts))
    return {"measured": _percentiles(measured_r, level), "predicted": _percentiles(predicted_r, level),
            "error": _percentiles(predicted_r - measured_r, level)}


def ratio_error_interval(measured_base: Sequence[float], measured: Sequence[float],
                         predicted_base, predicted, level: float = RATIO_LEVEL,
                         resamples: int = RATIO_RESAMPLES, seed: int = 0) -> list[float]:
    """Percentile bootstrap interval ``[lo, hi]`` of the predicted ratio less the measured one
    (:func:`ratio_intervals`' ``error``).

    Each resample redraws all four samples (measured and predicted, baseline
    and order) and takes its predicted ratio less its measured ratio. With the
    same ``seed`` its measured ratios are those of :func:`ratio_interval`.

    Examples
    --------
    >>> lo, hi = ratio_error_interval([1.0, 1.1, 0.9], [0.8, 0.9, 0.7], [1.0, 1.0, 1.0], [0.8, 0.8, 0.8])
    >>> bool(lo < 0 < hi)
    True
    >>> ratio_error_interval([1.0], [0.5], [1.0], [0.4])
    [0.5, 0.5]
    """
    return ratio_intervals(measured_base, measured, predicted_base, predicted, level, resamples, seed)["error"]


def ratio_verdict(interval: Sequence[float], target: float = RATIO_TARGET) -> str:
    """``within`` when the whole error interval lies in ``[−target, +target]``, ``outside`` when all of it lies
    beyond one end, ``undecided`` when it spans an end (or is NaN).

    Examples
    --------
    >>> ratio_verdict([-0.02, 0.03]), ratio_verdict([0.07, 0.2]), ratio_verdict([0.03, 0.08])
    ('within', 'outside', 'undecided')
    """
    lo, hi = interval
    if -target <= lo and hi <= target:
        return "within"
    if lo > target or hi < -target:
        return "outside"
    return "undecided"


def add_ratio_intervals(rows: dict[str, dict], samples: Mapping[str, tuple], baseline: str = "random",
                        target: float = RATIO_TARGET) -> None:
    """Add ``measured_ratio_ci``, ``predicted_ratio_ci``, ``ratio_error_ci`` and ``ratio_verdict`` to every
    row but ``baseline``'s, in place; ``samples[name]`` is ``(measured, predicted)``: measured iteration times,
    and predicted ones, plain or a :class:`PredictedSample` (:func:`ratio_intervals`).

    Examples
    --------
    >>> rows = {"random": {}, "tac": {}}
    >>> add_ratio_intervals(rows, {"random": ([1.0, 1.0], [1.0, 1.0]), "tac": ([0.8, 0.8], [0.8, 0.8])})
    >>> rows["tac"]["measured_ratio_ci"], rows["tac"]["ratio_verdict"], rows["random"]
    ([1.25, 1.25], 'within', {})
    """
    if baseline not in rows:
        return
    mb, pb = samples[baseline]
    for name, row in rows.items():
        if name == baseline:
            continue
        m, p = samples[name]
        ci = ratio_intervals(mb, m, pb, p)
        row.update(measured_ratio_ci=ci["measured"], predicted_ratio_ci=ci["predicted"], ratio_error_ci=ci["error"],
                   ratio_verdict=ratio_verdict(ci["error"], target))


def calibration_check(unordered: Sequence[float], tic: Sequence[float], target: float = RATIO_TARGET) -> dict:
    """How well the calibrated simulator reproduces the job's own calibration iterations.

    ``unordered`` and ``tic`` are ``(measured mean, predicted mean)`` of the
    unscored unordered and TIC calibration iterations. The calibration fits
    the compute to their busy time, not to their iteration times, so these
    are a second check of the model, taken in the same job as the scored
    orders: ``ratio_error`` is the predicted TIC/unordered throughput ratio
    less the measured one, what the scored ``ratio_error`` of an enforced
    order would be if the scored iterations ran as these did. Beside a busy
    loop it followed the scored TAC error (the simulator predicted both TIC
    and TAC 3–8% fast, before the workers' crowding on shared cores was
    modelled); ``beyond_target`` says when it is outside ±``target``.

    Examples
    --------
    >>> c = calibration_check((1.50, 1.49), (1.00, 0.94))
    >>> round(c["unordered"]["error"], 3), round(c["tic"]["error"], 3), round(c["ratio_error"], 3), c["beyond_target"]
    (-0.007, -0.06, 0.085, True)
    """
    out = {name: {"measured": float(m), "predicted": float(p), "error": relative_error(p, m)}
           for name, (m, p) in (("unordered", unordered), ("tic", tic))}
    ratio = out["unordered"]["predicted"] / out["tic"]["predicted"] - out["unordered"]["measured"] / out["tic"]["measured"]
    return {**out, "ratio_error": float(ratio), "beyond_target": bool(abs(ratio) > target)}
