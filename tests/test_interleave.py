"""The balanced rounds of an interleaved job (dlsched.jobs.interleave): a Williams design."""
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlsched.jobs.interleave import balanced_rounds, slot_schedule


@given(st.integers(1, 12))
def test_every_round_is_a_permutation_and_every_slot_stands_in_every_place_alike(n):
    rounds = balanced_rounds(n)
    assert all(sorted(r) == list(range(n)) for r in rounds)
    for place in range(n):
        counts = Counter(r[place] for r in rounds)
        assert set(counts) == set(range(n)) and len(set(counts.values())) == 1


@given(st.integers(2, 12))
def test_every_slot_follows_every_other_alike(n):
    rounds = balanced_rounds(n)
    pairs = Counter((a, b) for r in rounds for a, b in zip(r, r[1:]))
    assert set(pairs) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert set(pairs.values()) == {1 if n % 2 == 0 else 2}


@given(st.integers(1, 8), st.integers(0, 30))
def test_the_schedule_runs_each_slot_once_per_round(n, rounds):
    slots = [f"s{i}" for i in range(n)]
    sched = slot_schedule(slots, rounds)
    assert len(sched) == n * rounds
    assert all(sorted(sched[k * n:(k + 1) * n]) == sorted(slots) for k in range(rounds))


def test_no_slot_is_refused():
    with pytest.raises(ValueError, match="at least one slot"):
        balanced_rounds(0)
