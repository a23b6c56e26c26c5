"""The order of the slots in an interleaved job: rounds balanced for position and for the slot just before.

``validate`` runs every transfer order (and its calibration slots) in one job,
one iteration each in turn, so that the machine's drift hits each alike. In the
same order every round, a slot always follows the same slot and always sits in
the same place of its round. Whatever the iteration before leaves behind (the
scheduler's view of who slept, caches, a co-runner's share of the cores) then
lands on one slot only. Beside a busy loop on a 2-core VM it did: the unordered
calibration iteration, always after a TAC one, computed 5% slower than the
scored unordered iteration, always after a TIC one (1.225 s against 1.168 s,
40 records each), so the baseline was predicted slow in every run beside a busy
loop (issue 33).

:func:`balanced_rounds` is a Williams design, the crossover trials' answer to
carry-over: over its rounds every slot stands in every place once and, for an
even number of slots, follows every other slot exactly once (an odd number
needs twice the rounds: the rows and their mirror images).

Examples
--------
>>> balanced_rounds(4)
[[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
>>> balanced_rounds(3)
[[0, 1, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0], [0, 2, 1], [1, 0, 2]]
"""
from __future__ import annotations


def balanced_rounds(n: int) -> list[list[int]]:
    """Rounds of the slots ``0 … n−1``: a Williams design (module docstring).

    The first round is ``0, 1, n−1, 2, n−2, …``; round ``k`` adds ``k``
    (mod ``n``) to it. For even ``n`` these ``n`` rounds hold every ordered
    pair of distinct slots once as neighbours; for odd ``n`` the ``n`` mirrored
    rounds are appended, and every pair is neighbours twice.

    Raises
    ------
    ValueError
        ``n`` below 1.
    """
    if n < 1:
        raise ValueError(f"need at least one slot, got {n}")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rounds = [[(s + k) % n for s in first] for k in range(n)]
    return rounds if n % 2 == 0 or n == 1 else rounds + [r[::-1] for r in rounds]


def rotation(slots: list, round_: int) -> list:
    """The slots in round ``round_``'s order: the balanced rounds, cycled.

    >>> [rotation(["a", "b", "c", "d"], r) for r in range(2)]
    [['a', 'b', 'd', 'c'], ['b', 'c', 'a', 'd']]
    """
    design = balanced_rounds(len(slots))
    return [slots[i] for i in design[round_ % len(design)]]


def slot_schedule(slots: list, rounds: int) -> list:
    """The slot of each iteration of ``rounds`` rounds (:func:`rotation`, one round after another).

    >>> slot_schedule(["a", "b"], 3)
    ['a', 'b', 'b', 'a', 'a', 'b']
    """
    return [s for r in range(rounds) for s in rotation(slots, r)]
