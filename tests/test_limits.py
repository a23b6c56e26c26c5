"""Work budgets (``dlsched/limits.py``), the shared numeric option types and the progress helper (``cli/common.py``)."""
from __future__ import annotations

import io
import math
from decimal import Decimal

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from dlsched import limits
from dlsched.cli.common import (BANDWIDTH, BYTES, FRACTION, NONNEG_FLOAT, POSITIVE_DURATION, WorkCount,
                                WorkProgress)
from dlsched.errors import DlschedError, WorkLimitError


# -- estimates -----------------------------------------------------------------------------------

def test_simulate_work_counts_op_steps_and_rows():
    w = limits.simulate_work(1_372, workers=4, iterations=20, runs=9)
    assert w.amount == 4 * 20 * (1_372 + limits.ROW_COST_OPS) * 9
    assert not w.at_least
    for part in ("4 workers", "20 iterations", "1,372 ops", "9 runs"):
        assert part in w.formula
    before_load = limits.simulate_work(None, 4, 20)
    assert before_load.at_least and before_load.amount == 4 * 20 * (1 + limits.ROW_COST_OPS)


def test_exact_work_counts_interchangeable_transfers_once():
    assert limits.exact_work([list("abc")]).amount == 6
    assert limits.exact_work([list("abc"), list("xy")]).amount == 12
    # a weight and a bias that the same ops wait for: one order, not two
    assert limits.exact_work([["wb", "wb", "c"]]).amount == 3
    assert limits.exact_work([]).amount == 1
    assert limits.exact_work([list(range(10))]).amount == limits.EXACT.limit  # ten on one server: the limit


def test_other_estimates():
    assert limits.profile_work(100, runs=5, warmup=1).amount == 600
    assert limits.profile_work(None, runs=10**9, warmup=1).at_least
    assert limits.batch_search_work([10, 1_000], 64).amount == 11 + 65
    assert limits.table_work(8).amount == 8


def test_documented_uses_fit_their_budgets():
    # make demo / docs/walkthrough.md: ResNet-50 training DAG (1,372 ops, 161 transfers, 1,050 compute ops)
    assert limits.simulate_work(1_372, 4, 20, runs=1 + 3 + 5).amount <= limits.SIMULATE.limit
    assert limits.profile_work(1_050, 5, 1).amount <= limits.PROFILE.limit
    assert limits.batch_search_work([512] * 4, 512).amount <= limits.PLAN_BATCH.limit
    assert limits.table_work(8).amount <= limits.CLUSTER_TABLE.limit
    # the real jobs: train-allreduce's defaults (4 processes, 50 steps, 3 collectives), bench_eager_real's 8
    # processes, train-ps's defaults (4 workers + 1 server, 50 iterations); replay-batch's table3 (32 × 2,000 × 4)
    assert limits.real_steps_work(4, 50, 3).amount <= limits.REAL_STEPS.limit
    assert limits.real_steps_work(5, 50).amount <= limits.REAL_STEPS.limit
    assert limits.ranks_work(8).amount <= limits.RANKS.limit
    assert limits.replay_work(32, 2_000, 4).amount <= limits.REPLAY.limit


# -- check_work ----------------------------------------------------------------------------------

def test_check_work_accepts_up_to_the_limit_and_refuses_above():
    budget = limits.Budget("widgets", 100, "--widgets")
    assert limits.check_work(limits.Work(100, "f"), budget).amount == 100
    with pytest.raises(WorkLimitError) as e:
        limits.check_work(limits.Work(101, "10 × 10 + 1"), budget, "frobnicate")
    msg = str(e.value)
    for needle in ("frobnicate", "101 widgets", "10 × 10 + 1", "limit of 100", "--widgets", "--max-work 101"):
        assert needle in msg, msg
    assert "\n" not in msg  # one paragraph
    assert isinstance(e.value, DlschedError) and e.value.exit_code == 2


def test_max_work_raises_and_lowers_the_limit():
    budget = limits.Budget("widgets", 100, "--widgets")
    assert limits.check_work(limits.Work(5_000, "f"), budget, max_work=5_000).amount == 5_000
    with pytest.raises(WorkLimitError, match="limit of 10 set by --max-work"):
        limits.check_work(limits.Work(11, "f"), budget, max_work=10)


def test_a_lower_bound_says_so():
    with pytest.raises(WorkLimitError, match=r"at least .*\(more than"):
        limits.check_work(limits.simulate_work(None, 10**6, 10**9), limits.SIMULATE, "simulate")


def test_alternative_is_named():
    with pytest.raises(WorkLimitError, match="--time-limit"):
        limits.check_work(limits.exact_work([list(range(12))]), limits.EXACT, "exact",
                          alternative="or pass --time-limit")


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**400))
def test_the_suggested_max_work_is_enough_and_parses(amount):
    """The value the message suggests, typed back into --max-work, lets the same work run."""
    with pytest.raises(WorkLimitError) as e:
        limits.check_work(limits.Work(amount, "f"), limits.Budget("u", 0, "-x"))
    suggested = str(e.value).split("--max-work ")[1].split(" ")[0]
    n = WorkCount().convert(suggested, None, None)
    assert n >= amount
    assert limits.check_work(limits.Work(amount, "f"), limits.Budget("u", 0, "-x"), max_work=n)


# -- the shared option types ---------------------------------------------------------------------

@pytest.mark.parametrize("kind,text", [
    (NONNEG_FLOAT, "nan"), (NONNEG_FLOAT, "inf"), (NONNEG_FLOAT, "-1"),
    (BYTES, "0"), (BYTES, "-1GiB"), (BYTES, "1e400"), (BANDWIDTH, "0Gbps"), (BANDWIDTH, "fast"),
    (POSITIVE_DURATION, "0s"), (FRACTION, "1"), (FRACTION, "150%"), (FRACTION, "nan"),
    (WorkCount(), "0"), (WorkCount(), "1.5"), (WorkCount(), "inf"), (WorkCount(), "lots"),
])
def test_meaningless_numbers_are_refused(kind, text):
    with pytest.raises(click.BadParameter):
        kind.convert(text, None, None)


def test_types_parse_what_they_should():
    assert BYTES.convert("16GiB", None, None) == 16 * 2**30
    assert BANDWIDTH.convert("10Gbps", None, None) == pytest.approx(1.25e9)
    assert POSITIVE_DURATION.convert("500ms", None, None) == pytest.approx(0.5)
    assert FRACTION.convert("10%", None, None) == pytest.approx(0.1)
    assert NONNEG_FLOAT.convert("0", None, None) == 0
    assert [WorkCount().convert(x, None, None) for x in ("20000000", "2e7", "20_000_000", "1.38e18")] == \
        [20_000_000, 20_000_000, 20_000_000, int(Decimal("1.38e18"))]


# -- the progress helper -------------------------------------------------------------------------

def _terminal():
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=80), buf


def test_progress_appears_only_after_the_delay():
    console, buf = _terminal()
    bar = WorkProgress("simulating m", total=100, unit="op-steps", delay=3600, console=console)
    bar(50)
    bar.close()
    assert buf.getvalue() == ""
    bar = WorkProgress("simulating m", total=100, unit="op-steps", delay=0, console=console)
    bar(50)
    bar.part(40)(10)  # a later run reports from its own zero
    assert bar.done == 50
    bar.close()
    out = buf.getvalue()
    assert "simulating m" in out and "50/100" in out and "op-steps" in out


def test_progress_takes_the_library_total_unless_it_has_its_own():
    console, buf = _terminal()
    bar = WorkProgress("profiling", unit="runs", delay=0, console=console)
    bar(2, 6)
    assert bar.total == 6
    bar.close()
    assert "2/6" in buf.getvalue()
    fixed = WorkProgress("x", total=10, delay=0, console=_terminal()[0])
    fixed(3, 999)
    assert fixed.total == 10
    fixed.close()


def test_no_progress_without_a_terminal():
    buf = io.StringIO()
    bar = WorkProgress("x", total=10, delay=0, console=Console(file=buf, force_terminal=False))
    bar(5)
    bar.close()
    assert buf.getvalue() == "" and not bar.enabled


def test_a_second_bar_at_once_is_not_an_error():
    console, buf = _terminal()
    first = WorkProgress("first", total=10, delay=0, console=console)
    first(1)
    second = WorkProgress("second", total=10, delay=0, console=console)
    second(1)  # rich nests it, or (older rich) it goes without a bar; never a LiveError
    second.close()
    first.close()
    assert "first" in buf.getvalue()


def test_simulate_workers_reports_op_steps():
    from dlsched.analyses.multiworker import simulate_workers
    from dlsched.synthetic import random_dag

    g, t = random_dag(30, 8, training=True, seed=2)
    seen = []
    simulate_workers(g, t, workers=3, iterations=4, keep_timeline=False, progress=lambda d, tot: seen.append((d, tot)))
    total = len(g) * 3 * 4
    assert seen[-1] == (total, total)
    assert all(tot == total for _, tot in seen) and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_exact_search_reports_progress_and_its_budget(monkeypatch):
    from dlsched.analyses import exact
    from dlsched.synthetic import random_dag

    g, t = random_dag(60, 30, training=True, seed=4)
    with pytest.raises(WorkLimitError, match="time limit"):
        exact.exact_order(g, t)
    monkeypatch.setattr(exact, "PROGRESS_EVERY", 1)
    seen = []
    r = exact.exact_order(g, t, time_limit=0.3, progress=lambda d, tot: seen.append((d, tot)))
    assert seen and seen[-1][1] is None and seen[-1][0] <= r.explored
    small, st_ = random_dag(10, 4, seed=3)
    assert math.isfinite(exact.exact_order(small, st_, max_work=24).makespan)  # 4! orders: within 24
    with pytest.raises(WorkLimitError, match="limit of 23 set by --max-work"):
        exact.exact_order(small, st_, max_work=23)
