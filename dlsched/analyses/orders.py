"""One entry point for every transfer order (DESIGN §4.3–4.5).

``tic`` and ``tac`` are TicTac's heuristics (§4.2, §4.3); ``random`` is what an
unordered framework does; ``topo`` (alias ``layer``) is the order of first use
that P3 and ByteScheduler prioritise by; ``exact`` is the optimum for small
graphs.
"""
from __future__ import annotations

import random
from typing import Mapping

from dlsched.dag import COMPUTE, Graph
from dlsched.errors import DlschedError

ALGORITHMS = ("tic", "tac", "random", "topo", "layer", "exact")
NEEDS_TIMES = ("tac", "exact")
#: No order at all: each worker takes ready transfers at random, like a framework without ordering.
UNORDERED = "unordered"
#: What a simulation can run under: each algorithm once (``layer`` is ``topo``), or no order.
ORDERS = (*(a for a in ALGORITHMS if a != "layer"), UNORDERED)


def compute_order(graph: Graph, algo: str, times: Mapping[str, float] | None = None, seed: int = 0,
                  time_limit: float | None = None, max_work: int | None = None, progress=None) -> dict[str, int]:
    """Priority numbers of ``graph``'s recv ops by the named algorithm.

    Parameters
    ----------
    graph : Graph
    algo : {"tic", "tac", "random", "topo", "layer", "exact"}
    times : mapping, optional
        Op name → seconds; required by ``tac`` and ``exact``.
    seed : int
        Seed of the ``random`` permutation.
    time_limit : float, optional
        Search time for ``exact`` (then any graph size is accepted).
    max_work, progress : optional
        ``exact`` only: its work budget and progress callback (see
        :func:`dlsched.analyses.exact.exact_order`).

    Returns
    -------
    dict
        Recv op name → priority (lower goes first), in canonical order.

    Raises
    ------
    DlschedError
        Unknown algorithm, or ``tac``/``exact`` without times; ``exact`` on a
        graph too large for it without a time limit.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(10, 3, seed=1)
    >>> sorted(compute_order(g, "random", seed=4).values())
    [0, 1, 2]
    """
    algo = algo.lower()
    if algo not in ALGORITHMS:
        raise DlschedError(f"unknown ordering algorithm {algo!r}; choose one of {', '.join(ALGORITHMS)}")
    check_times_given(algo, times is not None)
    if algo == "tic":
        from .tic import tic_order
        return tic_order(graph)
    if algo == "tac":
        from .tac import tac_order
        return tac_order(graph, times)
    if algo == "random":
        return random_order(graph, seed)
    if algo in ("topo", "layer"):
        return first_use_order(graph)
    from .exact import exact_order
    return dict(exact_order(graph, times, time_limit=time_limit, max_work=max_work, progress=progress).priorities)


def check_times_given(algo: str, given: bool) -> None:
    """Refuse an order that needs times (``tac``, ``exact``) without them: the one message for it.

    >>> check_times_given("tac", False)
    Traceback (most recent call last):
    ...
    dlsched.errors.DlschedError: --algo tac needs a time oracle: pass --oracle oracle.csv (make one with dlsched profile), or use --algo tic, topo or random, which need only the graph
    """
    if algo in NEEDS_TIMES and not given:
        raise DlschedError(f"--algo {algo} needs a time oracle: pass --oracle oracle.csv (make one with "
                           "dlsched profile), or use --algo tic, topo or random, which need only the graph")


def random_order(graph: Graph, seed: int = 0) -> dict[str, int]:
    """A seeded random permutation of the transfers (an unordered framework, DESIGN §4.5).

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, _ = random_dag(10, 4, seed=1)
    >>> random_order(g, 3) == random_order(g, 3)
    True
    """
    names = [op.name for op in graph.recvs()]
    perm = list(names)
    random.Random(seed).shuffle(perm)
    position = {n: i for i, n in enumerate(perm)}
    return {n: position[n] for n in names}


def first_use_order(graph: Graph) -> dict[str, int]:
    """Transfers in order of first use (``topo`` / ``layer``, DESIGN §4.5).

    A recv's rank is the earliest position, in the canonical topological
    order, of a compute op that consumes it directly; recvs first used by the
    same op (or never used by a compute op, which go last) keep canonical
    order. Priorities are distinct 0..n−1.

    Examples
    --------
    >>> from dlsched.dag import Graph, RECV, COMPUTE
    >>> g = Graph("two")
    >>> for n in ("w_late", "w_early"): _ = g.add_op(n, RECV)
    >>> for n in ("first", "second"): _ = g.add_op(n, COMPUTE)
    >>> g.add_edge("first", "second"); g.add_edge("w_early", "first"); g.add_edge("w_late", "second")
    >>> first_use_order(g)
    {'w_late': 1, 'w_early': 0}
    """
    position = {op.name: i for i, op in enumerate(graph.topological_order())}
    never = len(position)
    recvs = graph.recvs()

    def first_use(op) -> int:
        uses = [position[s] for s in graph.successors(op.name) if graph.op(s).kind == COMPUTE]
        return min(uses, default=never)

    ranked = sorted(recvs, key=lambda op: (first_use(op), op.index))
    rank = {op.name: i for i, op in enumerate(ranked)}
    return {op.name: rank[op.name] for op in recvs}
