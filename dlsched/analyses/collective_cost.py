"""α–β cost of an all-reduce and of the activation broadcast of a partial collective (DESIGN §4.8).

A message of ``n`` bytes between two processes costs ``α + n/β`` (latency α in
seconds, bandwidth β in bytes/s). Over ``P`` processes:

- ring all-reduce (reduce-scatter then all-gather, ``P − 1`` rounds each, a
  ``n/P`` chunk per round): ``2(P−1)·α + 2(P−1)/P · n/β``;
- recursive doubling (eager-SGD's fflib2, ``⌈log2 P⌉`` rounds of the whole
  message): ``⌈log2 P⌉·(α + n/β)``;
- ring all-gather or reduce-scatter (FSDP): ``(P−1)·α + (P−1)/P · n/β``;
- the activation of a solo or majority collective, a tiny message spread
  along binomial trees from the initiator: ``⌈log2 P⌉·α`` (eager-SGD §4.1.1).

One process all-reduces with itself for free.

Examples
--------
>>> ring_allreduce(4, 1e6, alpha=1e-5, beta=1e9)  # 6α + 1.5 ms
0.00156
>>> recursive_doubling_allreduce(8, 1e6, alpha=1e-5, beta=1e9)  # 3·(α + 1 ms)
0.00303
>>> activation_broadcast(32, alpha=1e-5)
5e-05
>>> allreduce_cost("ring", 1, 1e9, 1e-5, 1e9)
0.0
"""
from __future__ import annotations

import math

from dlsched.errors import DlschedError

#: ``--algorithm`` choices.
ALGORITHMS = ("ring", "recursive-doubling")


def _rounds(processes: int) -> int:
    return math.ceil(math.log2(processes)) if processes > 1 else 0


def ring_allreduce(processes: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring all-reduce: ``2(P−1)·α + 2(P−1)/P · n/β`` seconds."""
    P = processes
    return round(2 * (P - 1) * alpha + 2 * (P - 1) / P * nbytes / beta, 15)


def ring_all_gather(processes: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring all-gather (or reduce-scatter) of ``n`` bytes in all: ``(P−1)·α + (P−1)/P · n/β`` seconds, half a
    ring all-reduce (FSDP's collectives, issue 30).

    >>> ring_all_gather(4, 1e6, alpha=1e-5, beta=1e9)  # 3α + 0.75 ms
    0.00078
    """
    P = processes
    return round((P - 1) * alpha + (P - 1) / P * nbytes / beta, 15)


def recursive_doubling_allreduce(processes: int, nbytes: float, alpha: float, beta: float) -> float:
    """Recursive doubling: ``⌈log2 P⌉·(α + n/β)`` seconds."""
    return round(_rounds(processes) * (alpha + nbytes / beta), 15)


def activation_broadcast(processes: int, alpha: float) -> float:
    """Activation of a partial collective along binomial trees: ``⌈log2 P⌉·α`` seconds."""
    return round(_rounds(processes) * alpha, 15)


def allreduce_cost(algorithm: str, processes: int, nbytes: float, alpha: float, beta: float) -> float:
    """Seconds to all-reduce ``nbytes`` over ``processes`` with ``algorithm`` (one of :data:`ALGORITHMS`).

    Raises
    ------
    DlschedError
        An unknown algorithm, or α, β, n that mean nothing (negative, zero bandwidth, not finite).
    """
    check_network(alpha, beta)
    if not (math.isfinite(nbytes) and nbytes >= 0):
        raise DlschedError(f"a message size must be a finite number of bytes ≥ 0, got {nbytes}")
    if algorithm == "ring":
        return ring_allreduce(processes, nbytes, alpha, beta)
    if algorithm == "recursive-doubling":
        return recursive_doubling_allreduce(processes, nbytes, alpha, beta)
    raise DlschedError(f"unknown all-reduce algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")


def check_network(alpha: float, beta: float) -> None:
    """Refuse a latency that is negative or not finite, or a bandwidth that is not positive and finite."""
    if not (math.isfinite(alpha) and alpha >= 0):
        raise DlschedError(f"the network latency α must be a finite number of seconds ≥ 0, got {alpha}")
    if not (math.isfinite(beta) and beta > 0):
        raise DlschedError(f"the network bandwidth β must be a finite number of bytes/s > 0, got {beta}")
