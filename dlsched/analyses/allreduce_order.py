"""The ordered all-reduce's schedule: gradients cut into pieces, issued in a TicTac priority order (issue 29 item 4).

Stock DDP all-reduces its buckets in backward order, so the first layers,
which the next forward needs first, arrive last, and the next forward waits
for every bucket. The ordered all-reduce issues fixed *pieces* of the
gradients in an order dlsched computes offline (gloo's collectives must match
on every rank, so the order is static), updates each parameter as soon as its
pieces are done, and lets each module of the next forward wait only for its
own parameters (DESIGN §4.8, the contract of ``docs/plan-ddp.md``).

- **Pieces** (:func:`make_pieces`): gradients in their ready order
  (:func:`.grad_ready_order.ready_order`), packed into pieces of at most
  ``piece_bytes``; a parameter never shares a piece it does not fit in whole,
  and a parameter larger than ``piece_bytes`` is cut into element slices (its
  last slice may take the next small ones). A large low-priority gradient
  then no longer holds back a small high-priority one (ByteScheduler and P3
  partition for this reason).
- **Priorities** (:func:`param_priorities`): TIC over the training graph's
  recv ops (TicTac §4.2): what the next forward needs first gets the best
  (lowest) number; ties go to the order of first use, so every parameter has
  its own rank. A piece takes its best parameter's.
- **Issue order** (:func:`issue_order`): list scheduling on the one link,
  with the backward's simulated gradient-ready times: whenever the link is
  free it issues the ready piece of best priority (earliest ready, then
  ready order, on ties); when none is ready it waits for the next.

Pure functions on plain data (names, element ranges), so the hook layer can
reuse them.

Examples
--------
>>> pieces = make_pieces(["b", "a"], {"a": 10, "b": 3}, {"a": 4, "b": 4}, piece_bytes=16)
>>> [p.slices for p in pieces]
[(('b', 0, 3),), (('a', 0, 4),), (('a', 4, 8),), (('a', 8, 10),)]
>>> [p.bytes for p in pieces]
[12, 16, 16, 8]
>>> order = issue_order(pieces, {"a": 0, "b": 1}, {"a": 1.0, "b": 0.5}, cost=lambda n: 1.0)
>>> order
[0, 1, 2, 3]
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from dlsched.dag import COMPUTE, Graph, dtype_size
from dlsched.errors import DlschedError

from .grad_ready_order import ready_order
from .orders import first_use_order
from .simulate import simulate
from .tic import tic_order

#: Priority sources: TIC (the default), the order of first use, and the ready order (stock DDP's order).
PRIORITIES = ("tic", "topo", "ready")


@dataclass(frozen=True)
class Piece:
    """Element slices ``(param, start, stop)`` of ``param.grad.view(-1)`` all-reduced together, their bytes,
    and the piece's priority (its best parameter's; lower goes first)."""

    slices: tuple[tuple[str, int, int], ...]
    bytes: int
    priority: int = 0

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s[0] for s in self.slices))


def make_pieces(order: Sequence[str], elements: Mapping[str, int], itemsize: Mapping[str, int],
                piece_bytes: int, priorities: Mapping[str, int] | None = None) -> list[Piece]:
    """Cut the gradients, given in ready order, into pieces of at most ``piece_bytes`` (module docstring).

    Parameters
    ----------
    order : sequence of str
        Parameter names, first ready first.
    elements, itemsize : mapping
        Each parameter's element count and bytes per element.
    piece_bytes : int
        The most bytes in a piece (a single element larger than that still makes one piece).
    priorities : mapping, optional
        Parameter → priority; a piece takes the best of its parameters' (0 for all when not given).

    Returns
    -------
    list of Piece
        In ready order; every element of every parameter in exactly one piece.

    Raises
    ------
    DlschedError
        ``piece_bytes`` not positive, a parameter named twice, or without a size.
    """
    if piece_bytes <= 0:
        raise DlschedError(f"the piece size must be a positive number of bytes, got {piece_bytes}")
    if len(set(order)) != len(order):
        raise DlschedError("a parameter appears twice in the ready order")
    missing = [p for p in order if p not in elements or p not in itemsize]
    if missing:
        raise DlschedError(f"no size for parameter(s) {', '.join(missing[:5])}")
    prio = priorities or {}
    pieces: list[list[tuple[str, int, int]]] = []
    open_: list[tuple[str, int, int]] = []
    used = 0

    def close():
        nonlocal open_, used
        if open_:
            pieces.append(open_)
        open_, used = [], 0

    for p in order:
        n, size = int(elements[p]), int(itemsize[p])
        if n <= 0:
            continue
        if n * size > piece_bytes - used and open_:
            close()  # a parameter that fits no more is not split across pieces; a large one starts afresh
        start = 0
        while start < n:
            take = min(n - start, max(1, (piece_bytes - used) // size))
            open_.append((p, start, start + take))
            used += take * size
            start += take
            if used >= piece_bytes or start < n:  # full
                close()
    close()
    size_of = {p: int(itemsize[p]) for p in order}
    return [Piece(tuple(s), sum((b - a) * size_of[p] for p, a, b in s),
                  min((int(prio.get(p, 0)) for p, _, _ in s), default=0)) for s in pieces]


def param_priorities(graph: Graph, algo: str = "tic", times: Mapping[str, float] | None = None) -> dict[str, int]:
    """Distinct priority ranks 0..n−1 of the trained parameters (lower: all-reduced first).

    ``tic``: TIC's numbers (TicTac §4.2) on the training graph, ties broken by
    the order of first use; ``topo``: the order of first use alone (P3,
    ByteScheduler); ``ready``: the gradient-ready order (what stock DDP sends first).

    Raises
    ------
    DlschedError
        An unknown ``algo``, or an inference graph.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(12, 5, training=True, seed=4)
    >>> sorted(param_priorities(g).values()) == list(range(5))
    True
    """
    if algo not in PRIORITIES:
        raise DlschedError(f"unknown priority source {algo!r}; choose one of {', '.join(PRIORITIES)}")
    trained = ready_order(graph, times)
    if algo == "ready":
        return {p: i for i, p in enumerate(trained)}
    topo = first_use_order(graph)
    tic = tic_order(graph) if algo == "tic" else {}
    ranked = sorted(trained, key=lambda p: (tic.get(p, 0), topo[p]))
    return {p: i for i, p in enumerate(ranked)}


def param_itemsizes(graph: Graph) -> dict[str, int]:
    """Bytes per element of each trained parameter's gradient."""
    return {s.param: dtype_size((s.dtypes or ["float32"])[0]) for s in graph.sends()}


def param_elements(graph: Graph) -> dict[str, int]:
    """Elements of each trained parameter (``param.grad.view(-1)``'s length)."""
    size = param_itemsizes(graph)
    return {s.param: int(graph.op(s.param).params) if s.param in graph and graph.op(s.param).params
            else s.bytes // size[s.param] for s in graph.sends()}


def gradient_ready_times(graph: Graph, times: Mapping[str, float]) -> dict[str, float]:
    """Seconds from the step's start at which each parameter's gradient is ready: one step simulated with
    every transfer free (:func:`.simulate.simulate`), as :func:`.ddp_buckets.step_shape` does."""
    free = {op.name: (0.0 if op.kind != COMPUTE else float(times[op.name])) for op in graph.ops()}
    end = simulate(graph, free, unordered="canonical").end
    return {s.param: float(end[s.name]) for s in graph.sends()}


def issue_order(pieces: Sequence[Piece], priorities: Mapping[str, int], ready: Mapping[str, float],
                cost: Callable[[int], float]) -> list[int]:
    """The static issue order: list scheduling of ``pieces`` on one link (module docstring).

    Parameters
    ----------
    pieces : sequence of Piece
    priorities : mapping
        Parameter → priority (lower first); a piece takes its best parameter's.
    ready : mapping
        Parameter → when its gradient is ready (seconds).
    cost : callable
        Bytes → seconds of one all-reduce.

    Returns
    -------
    list of int
        Indices into ``pieces``, a permutation, in issue order.
    """
    keyed = []
    for i, piece in enumerate(pieces):
        at = max(float(ready[p]) for p in piece.params)
        best = min(int(priorities.get(p, 0)) for p in piece.params)
        keyed.append((at, best, i))
    waiting = sorted(keyed)
    order: list[int] = []
    now, k = 0.0, 0
    heap: list[tuple[int, float, int]] = []
    while len(order) < len(pieces):
        if not heap and k < len(waiting) and waiting[k][0] > now:
            now = waiting[k][0]
        while k < len(waiting) and waiting[k][0] <= now:
            at, best, i = waiting[k]
            heapq.heappush(heap, (best, at, i))
            k += 1
        _, _, i = heapq.heappop(heap)
        order.append(i)
        now += float(cost(pieces[i].bytes))
    return order


@dataclass(frozen=True)
class OrderedSchedule:
    """The ordered all-reduce's schedule: pieces in issue order, and the piece size they were cut to."""

    pieces: tuple[Piece, ...]
    piece_bytes: int


def ordered_schedule(graph: Graph, times: Mapping[str, float], piece_bytes: int, cost: Callable[[int], float],
                     priority: str = "tic") -> OrderedSchedule:
    """Pieces of ``graph``'s gradients in their issue order (:func:`make_pieces`, :func:`issue_order`).

    Raises
    ------
    DlschedError
        An inference graph, a piece size of no bytes, an unknown priority source.

    Examples
    --------
    >>> from dlsched.synthetic import random_dag
    >>> g, t = random_dag(16, 6, training=True, seed=5)
    >>> s = ordered_schedule(g, t, 64 * 1024, cost=lambda n: 1e-4 + n / 1e9)
    >>> sum(p.bytes for p in s.pieces) == sum(op.bytes for op in g.sends())
    True
    """
    order = ready_order(graph, times)
    itemsize = param_itemsizes(graph)
    elements = param_elements(graph)
    prio = param_priorities(graph, priority, times)
    pieces = make_pieces(order, elements, itemsize, piece_bytes, prio)
    ranked = issue_order(pieces, prio, gradient_ready_times(graph, times), cost)
    return OrderedSchedule(tuple(pieces[i] for i in ranked), int(piece_bytes))
