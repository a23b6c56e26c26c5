"""Synchronous parameter-server training with several workers (DESIGN §4.6).

``W`` identical workers each run the whole graph on their own compute
resource. Every parameter server's downlink (``ps:K/down``) and uplink
(``ps:K/up``) is shared by all workers. An iteration ends when the slowest
worker finishes (synchronous training), so a worker with a bad transfer order
makes all others wait: the straggler effect of TicTac §2.2 and §6.

Link sharing (``sharing``), each model a
:class:`~dlsched.analyses.links.LinkPolicy` of :mod:`dlsched.analyses.links`
(a new model is a new policy there; the event loop stays as it is):

``"serial"``
    A link serves one transfer at a time, whichever worker it is for. It takes
    the ready transfer with the lowest (priority rank, worker turn) — at equal
    rank the workers are served round-robin, and the worker that goes first
    rotates every iteration so no worker is favoured for good. Gradient sends
    go first-ready-first.
``"fair"`` (default: it predicts bench_validate.py's real runs at least as well, DESIGN §4.7)
    Each worker has its own stream on every link, which carries one transfer
    at a time (TicTac §5.1: one gRPC channel per worker–server pair), and the
    link's capacity is split evenly among the streams with a transfer in
    flight (processor sharing). Identical workers under the same enforced
    order then progress in lock-step and finish together.

Transfer orders: with ``priorities`` every worker enforces the same order;
without, each worker draws its own random order, per worker and per
iteration (what an unordered framework does).

Jitter: with ``jitter = σ > 0`` every op's time on every worker in every
iteration is multiplied by an independent lognormal factor
``exp(σ·Z − σ²/2)``, ``Z ~ N(0, 1)`` (mean 1, so the oracle stays the mean
time), seeded by ``seed``. ``σ = 0`` (default) gives identical iterations for
enforced orders; ``σ`` above :data:`MAX_JITTER` is refused, since the median
factor ``exp(−σ²/2)`` then rounds most ops down to nothing.

Reported per iteration: the iteration time ``T`` (slowest worker), its
efficiency ``E_W`` against the bounds of all ``W`` workers sharing the links,
each worker's makespan and its own efficiency from its realised op durations
(:mod:`dlsched.analyses.multiworker_bounds`), and the **straggler share**
``(max_i m_i − min_i m_i) / max_i m_i``. ``E_W`` always lies in [0, 1]. A
worker's own ``E`` is NaN with a positive model error when it sat idle while
its transfers queued behind other workers' (``serial`` links): its own
bounds do not count that wait.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from dlsched.dag import RECV, Graph
from dlsched.errors import DlschedError

from .links import DEFAULT_SHARING, LINK_POLICIES, LinkPolicy
from .simulate import SimGraph, compile_graph, transfer_ranks

#: Link-sharing models (``sharing=``), one :class:`~dlsched.analyses.links.LinkPolicy` each.
SHARING = tuple(LINK_POLICIES)
MAX_JITTER = 2.0


@dataclass
class MultiWorkerResult:
    """Outcome of :func:`simulate_workers`.

    Attributes
    ----------
    per_worker : pandas.DataFrame
        One row per (iteration, worker): the columns
        :data:`~dlsched.analyses.multiworker_bounds.PER_WORKER` (``makespan``;
        ``upper``, ``lower``, ``efficiency`` and ``model_error`` from the
        worker's realised durations; ``wait`` for the slowest worker) and
        ``iteration_time``.
    per_iteration : pandas.DataFrame
        One row per iteration: the columns
        :data:`~dlsched.analyses.multiworker_bounds.PER_ITERATION`
        (``iteration_time``, ``straggler_share``; ``upper``, ``lower``,
        ``efficiency`` ``E_W`` and ``model_error`` from the iteration's op times).
    upper, lower : float
        The oracle's bounds ``U_W`` and ``L_W`` for ``workers`` workers
        (:func:`~dlsched.analyses.multiworker_bounds.multiworker_bounds`;
        TicTac §3.2's ``U``, ``L`` for one).
    timeline : pandas.DataFrame
        Every iteration's ops (up to :data:`TIMELINE_ROWS`): ``worker``, ``iteration``, ``op``, ``kind``,
        ``resource``, ``start``, ``end`` (from the run's start: iteration ``k``
        starts when ``k − 1`` ended), ``priority`` (for trace and Gantt exports).
    """

    per_worker: object
    per_iteration: object
    upper: float
    lower: float
    workers: int
    iterations: int
    sharing: str
    enforced: bool
    timeline: object = None
    extra: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """Mean, p50, p95, min and max of the iteration time, straggler share, ``E_W`` (``efficiency``) and
        the workers' own E (``worker_efficiency``, over the workers that have one; ``None`` if none has)."""
        from .multiworker_bounds import _stats

        it = self.per_iteration
        return {
            "workers": self.workers,
            "iterations": self.iterations,
            "sharing": self.sharing,
            "enforced": self.enforced,
            "iteration_time": _stats(it["iteration_time"]),
            "straggler_share": _stats(it["straggler_share"]),
            "efficiency": _stats(it["efficiency"]),
            "worker_efficiency": _stats(self.per_worker["efficiency"]),
        }


#: Completed op-steps between two progress reports (a report costs far more than an op-step).
PROGRESS_EVERY = 16_384
#: Most timeline rows kept (one per op of a worker in an iteration): whole iterations up to this, at
#: least the first. A Chrome trace takes ~150 B per row, so about 150 MB; the work budget allows 10 M.
TIMELINE_ROWS = 1_000_000

_DONE = -1.0  # due time of a finished op: no event time equals it


def run_workers(sg: SimGraph, durs: list[list[float]], ranks: list[list[int]], turn: list[int],
                 sharing: str, progress: Callable[[int], None] | None = None, overlap: float = 1.0,
                 crowd: Sequence[float] | None = None) -> tuple[list[list[float]], list[list[float]]]:
    """Simulate one iteration of ``len(durs)`` workers sharing the links: the simulator's event loop.

    This is the one statement of the event loop's semantics (DESIGN §4.6): the
    single-worker :func:`~dlsched.analyses.simulate.run_compiled` is its fast
    path for W = 1, and the exact reference simulator of the tests checks it.

    A discrete-event loop over the ops of all workers (op ``i`` of worker
    ``w`` is ``g = w·n + i``). Every queue serves one op at a time: each
    worker's own compute resources, and the streams of each link. A compute
    op ends its duration after it starts; how a transfer progresses is up to
    its link's :class:`~dlsched.analyses.links.LinkPolicy` (``sharing``),
    which the loop tells of every start and end and then asks for the new
    predicted ends. Each event is an op's predicted end; a prediction the
    link has since revised is skipped when it comes up.

    Parameters
    ----------
    sg : SimGraph
    durs : list of list of float
        ``durs[w][i]``: op ``i``'s time on worker ``w`` (a transfer's time alone on its link).
    ranks : list of list of int
        Worker ``w``'s transfer ranks (:func:`~dlsched.analyses.simulate.transfer_ranks`).
    turn : list of int
        Each worker's place among workers at equal rank (a permutation of ``range(W)``).
    sharing : str
        A key of :data:`~dlsched.analyses.links.LINK_POLICIES`.
    progress : callable, optional
        ``progress(done)`` hears the op-steps completed so far every
        :data:`PROGRESS_EVERY` of them.
    overlap : float
        A compute op that starts while its worker has a transfer in flight
        takes ``overlap`` times its time: moving the link's bytes costs the
        worker's own process CPU (measured by
        :func:`dlsched.analyses.calibration.calibrate_compute`; 1 = free).
        The rate is fixed at the op's start, which is exact for ops that are
        short against the transfers.
    crowd : sequence of float, optional
        A compute op that starts while ``k`` workers compute (itself and ops
        starting at the same moment included) takes ``crowd[k − 1]`` times its
        time: workers that share a few cores with each other and other load
        run slower together than alone
        (:func:`dlsched.analyses.calibration.crowd_factors`; None = all 1).

    Returns
    -------
    (start, end) : lists of lists of float
        ``start[w][i]``, ``end[w][i]`` in seconds.

    Examples
    --------
    Two workers fetch one parameter (1 s alone on the link) before a 1 s op.

    >>> from dlsched.dag import COMPUTE, RECV, Graph
    >>> from dlsched.analyses.simulate import compile_graph, transfer_ranks
    >>> g = Graph("one"); _ = g.add_op("w", RECV); _ = g.add_op("op", COMPUTE); g.add_edge("w", "op")
    >>> sg = compile_graph(g, {"w": 1.0, "op": 1.0})
    >>> rank = transfer_ranks(sg, {"w": 0})
    >>> run_workers(sg, [sg.dur] * 2, [rank] * 2, [0, 1], "serial")[1]
    [[1.0, 2.0], [2.0, 3.0]]
    >>> run_workers(sg, [sg.dur] * 2, [rank] * 2, [0, 1], "fair")[1]
    [[2.0, 3.0], [2.0, 3.0]]

    Only compute that overlaps a transfer is slowed: here none does.

    >>> run_workers(sg, [sg.dur] * 2, [rank] * 2, [0, 1], "fair", overlap=1.5)[1]
    [[2.0, 3.0], [2.0, 3.0]]
    """
    n, W = sg.n, len(durs)
    res, succ = sg.res, sg.succ
    on_link = [not r.startswith("compute") for r in sg.resources]
    policy = LINK_POLICIES[sharing]
    # Queues: qid[w][k] is where worker w's ops on resource k wait; owner[q] is
    # the link policy serving queue q, None for a worker's own compute resource.
    qid = [[0] * len(sg.resources) for _ in range(W)]
    owner: list[LinkPolicy | None] = []
    for k in range(len(sg.resources)):
        if on_link[k]:
            link = policy(W)
            base = len(owner)
            owner.extend([link] * link.streams)
            for w in range(W):
                qid[w][k] = base + link.stream(w)
        else:
            for w in range(W):
                qid[w][k] = len(owner)
                owner.append(None)
    # Queue entries (key, worker turn, i, g): parameter transfers (recvs on a link)
    # key on their rank, everything else on its ready time (first-ready-first);
    # ties go by worker turn, then canonical index.
    by_rank = [kind == RECV and on_link[k] for kind, k in zip(sg.kinds, res)]
    ready: list[list] = [[] for _ in owner]
    busy = [False] * len(owner)
    remaining = [sg.indeg[:] for _ in range(W)]
    start = [[0.0] * n for _ in range(W)]
    end = [[0.0] * n for _ in range(W)]
    due = [_DONE] * (W * n)  # latest predicted end of each running op; events that disagree are stale
    inflight = [0] * W  # transfers of each worker now on a link
    computing = [0] * W  # compute ops of each worker now running
    crowded = crowd is not None and any(c != 1.0 for c in crowd)
    events: list[tuple[float, int]] = []
    push, pop = heapq.heappush, heapq.heappop

    def dispatch(t: float, touched: list[int], changed: list[LinkPolicy]) -> None:
        """Start the next op on every idle queue in ``touched``, then push the new
        predicted ends of every link in ``changed`` or started on."""
        started = []
        for q in touched:
            if busy[q] or not ready[q]:
                continue
            g = pop(ready[q])[3]
            busy[q] = True
            w, i = divmod(g, n)
            start[w][i] = t
            if owner[q] is None:
                computing[w] += 1
            else:
                inflight[w] += 1
            started.append((q, g, w, i))
        k = sum(1 for c in computing if c) if crowded else 0
        for q, g, w, i in started:  # after every start, so that ops starting together see each other
            link = owner[q]
            if link is None:
                d = durs[w][i] * overlap if inflight[w] else durs[w][i]
                due[g] = e = t + (d * crowd[k - 1] if crowded else d)
                push(events, (e, g))
            else:
                link.admit(t, g, durs[w][i])
                changed.append(link)
        for link in dict.fromkeys(changed):  # once per link, after all of this round's changes
            for e, g in link.ends(t):
                due[g] = e
                push(events, (e, g))

    touched = []
    for w in range(W):
        qw, rw, tw = qid[w], ranks[w], turn[w]
        for i in range(n):
            if remaining[w][i] == 0:
                q = qw[res[i]]
                ready[q].append((rw[i] if by_rank[i] else 0.0, tw, i, w * n + i))
                touched.append(q)
    for q in ready:
        heapq.heapify(q)
    dispatch(0.0, touched, [])
    done = 0
    next_report = PROGRESS_EVERY if progress is not None else math.inf
    while events:
        t, g = pop(events)
        if due[g] != t:
            continue  # superseded by a later prediction of its link
        # Everything ending at t completes before any queue picks its next op.
        due[g] = _DONE
        batch = [g]
        while events and events[0][0] == t:
            g = pop(events)[1]
            if due[g] == t:
                due[g] = _DONE
                batch.append(g)
        touched, changed = [], []
        for g in batch:
            w, i = divmod(g, n)
            end[w][i] = t
            qw = qid[w]
            q = qw[res[i]]
            busy[q] = False
            touched.append(q)
            link = owner[q]
            if link is not None:
                link.finish(t, g)
                inflight[w] -= 1
                changed.append(link)  # the others on the link may speed up
            else:
                computing[w] -= 1
            rem, rw, tw, base = remaining[w], ranks[w], turn[w], w * n
            for j in succ[i]:
                rem[j] -= 1
                if rem[j] == 0:
                    qj = qw[res[j]]
                    push(ready[qj], (rw[j] if by_rank[j] else t, tw, j, base + j))
                    touched.append(qj)
        done += len(batch)
        dispatch(t, touched, changed)
        if done >= next_report:
            progress(done)
            next_report = done + PROGRESS_EVERY
    if done != W * n:
        raise DlschedError(f"multi-worker simulation of model {sg.graph.name!r} stalled; the graph has a cycle")
    return start, end


def simulate_workers(graph: Graph, times: Mapping[str, float], workers: int = 2,
                     priorities: Mapping[str, int] | None = None, iterations: int = 1, seed: int = 0,
                     jitter: float = 0.0, sharing: str = DEFAULT_SHARING, keep_timeline: bool = True,
                     progress: Callable[[int, int], None] | None = None) -> MultiWorkerResult:
    """Simulate ``iterations`` synchronous iterations of ``workers`` identical workers.

    Parameters
    ----------
    graph : Graph
    times : dict
        ``{op name: seconds}`` for every op.
    workers : int
        Number of workers ``W`` (≥ 1).
    priorities : dict, optional
        Enforced ``{recv name: priority}``, the same on every worker. ``None``:
        every worker draws its own random order, per iteration.
    iterations : int
    seed : int
        Seeds the random orders and the jitter.
    jitter : float
        Lognormal ``σ`` of per-op multiplicative noise (0: none); see the module docstring.
    sharing : {"serial", "fair"}
        How workers share a server link; see the module docstring.
    keep_timeline : bool
        Keep the iterations' per-op timeline (for exports), each iteration
        starting when the previous one ended: every iteration, or as many
        whole ones as :data:`TIMELINE_ROWS` holds.
    progress : callable, optional
        ``progress(done, total)`` in op-steps (one op of one worker in one
        iteration; ``total = ops × workers × iterations``), during and after
        every iteration. Callers bound the total beforehand with
        :func:`dlsched.limits.simulate_work`.

    Returns
    -------
    MultiWorkerResult

    Raises
    ------
    DlschedError
        ``workers`` or ``iterations`` below 1, negative jitter, an unknown sharing mode.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(30, 8, training=True, seed=2)
    >>> r = simulate_workers(g, t, workers=4, iterations=5, seed=1)
    >>> sorted(r.summary()["iteration_time"])
    ['max', 'mean', 'min', 'p50', 'p95']

    References
    ----------
    TicTac §2.2 and §6 (random orders across workers cause stragglers), §3.2 (E).
    """
    import pandas as pd

    if workers < 1:
        raise DlschedError(f"--workers must be at least 1, got {workers}")
    if iterations < 1:
        raise DlschedError(f"--iterations must be at least 1, got {iterations}")
    if not (0 <= jitter <= MAX_JITTER):
        raise DlschedError(f"--jitter is the lognormal sigma of per-op noise and must lie in [0, {MAX_JITTER:g}], "
                           f"got {jitter:g}; beyond that most ops take almost no time and rare draws carry the "
                           "mean, which describes no real machine (measured op noise is typically below 0.3)")
    if sharing not in LINK_POLICIES:
        raise DlschedError(f"unknown link sharing {sharing!r}; expected one of {', '.join(LINK_POLICIES)}")
    from .multiworker_bounds import PER_ITERATION, PER_WORKER, multiworker_bounds, rate_iteration

    sg = compile_graph(graph, times)
    b = multiworker_bounds(graph, times, workers)
    upper, lower = float(b.upper), float(b.lower)
    base = np.asarray(sg.dur, dtype=float)
    res = np.asarray(sg.res, dtype=np.intp)
    link = np.asarray([not r.startswith("compute") for r in sg.resources], dtype=bool)
    rng = np.random.default_rng(seed)
    enforced = priorities is not None
    fixed_rank = transfer_ranks(sg, priorities, seed, "canonical") if enforced else None
    rows, its = [], []
    frames, offset = [], 0.0  # an iteration starts when the previous one ended (lock-step)
    per_iteration = workers * sg.n
    total = per_iteration * iterations
    for it in range(iterations):
        report = None
        if progress is not None:
            report = (lambda done, base=it * per_iteration: progress(base + done, total))
        if jitter > 0:
            noise = rng.lognormal(-jitter * jitter / 2, jitter, size=(workers, sg.n))
            durs = (base[None, :] * noise).tolist()
        else:
            durs = [sg.dur] * workers
        if enforced:
            ranks = [fixed_rank] * workers
        else:
            ranks = [transfer_ranks(sg, None, int(rng.integers(2**31)), "random") for _ in range(workers)]
        turn = [(w - it) % workers for w in range(workers)]
        start, end = run_workers(sg, durs, ranks, turn, sharing, report)
        if progress is not None:
            progress((it + 1) * per_iteration, total)
        spans = [max(e, default=0.0) for e in end]
        worker_rows, row = rate_iteration(spans, *_loads(res, link, start, end), iteration=it)
        for r in worker_rows:
            r["iteration_time"] = row["iteration_time"]
        rows += worker_rows
        its.append(row)
        if keep_timeline and (it == 0 or (it + 1) * per_iteration <= TIMELINE_ROWS):
            for w in range(workers):
                p = priorities if enforced else {sg.names[i]: ranks[w][i] for i in sg.recv_ids}
                frames.append(pd.DataFrame({
                    "worker": w, "iteration": it, "op": sg.names, "kind": sg.kinds,
                    "resource": [sg.resources[k] for k in sg.res],
                    "start": np.asarray(start[w], dtype=float) + offset,
                    "end": np.asarray(end[w], dtype=float) + offset,
                    "priority": [p.get(nm, np.nan) for nm in sg.names]}))
        offset += row["iteration_time"]
    timeline = pd.concat(frames, ignore_index=True) if frames else None
    return MultiWorkerResult(pd.DataFrame(rows, columns=PER_WORKER + ["iteration_time"]),
                             pd.DataFrame(its, columns=PER_ITERATION), upper, lower, workers, iterations, sharing,
                             enforced, timeline)


def _loads(res, link, start, end) -> tuple[list[list[float]], list[float]]:
    """One iteration's loads: each worker's realised time per resource (a transfer's time on the wire), and
    every resource of the cluster's busy time (each worker's compute resources; each link, however it
    shares itself among the workers: the union of their transfers' times on it), as a trace is rated
    (:func:`~dlsched.analyses.multiworker_bounds.rate_ops`)."""
    from .multiworker_bounds import busy_time

    K = len(link)
    st, en = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    own = np.stack([np.bincount(res, weights=d, minlength=K) for d in en - st])
    links = [busy_time(zip(st[:, res == k].ravel().tolist(), en[:, res == k].ravel().tolist()))
             for k in np.flatnonzero(link)]
    return own.tolist(), own[:, ~link].ravel().tolist() + links
