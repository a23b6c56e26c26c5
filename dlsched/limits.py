"""Work budgets: the most work a command starts unasked, and the refusal of more (DESIGN §7).

Some work grows with numeric options: a simulation with ``ops × workers ×
iterations``, the exact search with the orders of each server's transfers,
profiling with ``runs``, a batch search with the global batch, a scaling
table with its rows. A typo (``--iterations 1000000000``) would otherwise run
for days or exhaust memory with nothing on screen.

Each kind of work has a :class:`Budget`: the unit it is counted in, the
largest amount done without asking, and the options it grows with. A
command estimates its work (:func:`simulate_work`, :func:`exact_work`, …)
from its options, *before* it loads or allocates anything big, and calls
:func:`check_work`; above the budget that raises a :class:`WorkLimitError`
(exit 2) that names the estimate, the limit, the options to lower and the
one option, on every such command, that raises it: ``--max-work N``, in the
unit the message states. The budgets are sized so that every documented use
(docs/, ``make demo``, the tests, ``benchmarks/``) stays well inside them.

Examples
--------
>>> w = simulate_work(ops=1_372, workers=4, iterations=20)
>>> w.amount, w.formula
(110400, '4 workers × 20 iterations × (1,372 ops + 8 per worker-iteration) × 1 run')
>>> check_work(w, SIMULATE).amount
110400
>>> check_work(simulate_work(1_372, 1_000_000, 10**9), SIMULATE, "simulate")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dlsched.errors.WorkLimitError: simulate would take about 1.38e+18 simulated op-steps ...
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from .errors import WorkLimitError

#: The option that raises every budget (each command that has one takes it).
MAX_WORK_OPTION = "--max-work"


@dataclass(frozen=True)
class Budget:
    """The most work of one kind that a command does without ``--max-work``.

    Attributes
    ----------
    unit : str
        What is counted, plural (``"simulated op-steps"``).
    limit : int
        The largest accepted amount.
    grows_with : str
        The options that make the work grow, as the refusal names them.
    """

    unit: str
    limit: int
    grows_with: str


#: Simulation: one op of one worker in one iteration is one op-step. About 0.1–0.4 M op-steps
#: per second here, and the iteration in flight holds ``workers × ops`` of them (~200 B each),
#: so the limit is at most a couple of minutes and about 2 GB (``make demo``: 1.1 M).
SIMULATE = Budget("simulated op-steps", 10_000_000, "--workers, --iterations or --compare")
#: Each (worker, iteration) also keeps a result row, about as much memory as this many op-steps
#: (measured: ~1.3 kB a row against ~200 B an op-step); it keeps tiny graphs honest.
ROW_COST_OPS = 8

#: Exact search: the transfer orders it may have to simulate without a time limit (each
#: server's transfers in every order, interchangeable twins counted once). 10! is ten
#: transfers on one server, the size the search finishes in seconds to minutes.
EXACT = Budget("candidate transfer orders", math.factorial(10),
               "the number of transfers per parameter server (--ps, or a smaller model)")

#: Profiling: every compute op runs once per warm-up and timed run. The framework profilers
#: keep per-run, per-op times, so memory grows with it as well as time (``make demo``: 6.3 k).
PROFILE = Budget("op runs", 5_000_000, "--runs or --warmup")

#: Heterogeneous batch plans with measured (non-linear) time curves: the exact solver
#: evaluates every worker's curve at every batch it could take (arrays of this many floats).
PLAN_BATCH = Budget("candidate batch sizes", 10_000_000, "--global-batch or the workers' memory")

#: Scaling tables: rendering one row costs ~0.3 ms, so 5,000 rows stay under ~2 s.
CLUSTER_TABLE = Budget("table rows", 5_000, "--max-devices or --target-speedup")

#: ``validate``: real iterations on the cluster, every order's plus two calibration slots per round
#: (:func:`cluster_work`). One takes 0.1-2 s on the benchmark's models, so 2,000 are up to an hour
#: (``benchmarks/bench_validate.py``: (4 + 2) × (40 + 2) = 252 per repeat).
CLUSTER = Budget("real iterations", 2_000, "--iterations, --warmup or --orders")


#: Real jobs (``train-ps``, ``train-allreduce``): local rank processes at once. Each is a Python process
#: with torch loaded (~300 MB) on this machine's cores; far more exhaust process slots or memory before
#: the job runs, and they start one after another (the tests run 2 to 8).
RANKS = Budget("rank processes", 64, "--processes, or --workers and --servers")
#: Real jobs: one step of one rank is a rank-step, 5-100 ms on the examples, so 200,000 are up to an hour
#: or two on 2 cores (``benchmarks/bench_eager_real.py``: 8 ranks × 3 collectives × ≤ 300 steps).
REAL_STEPS = Budget("rank-steps", 200_000, "--iterations, --processes / --workers or --collective")
#: ``plan-ddp``: its simulated steps, counted as SIMULATE counts them (each cap's step once, each piece
#: size's unrolled iterations with their pieces); the examples take well under 100,000.
PLAN_DDP = Budget("simulated op-steps", 10_000_000,
                  "the number of --caps and --piece-bytes values, or the number of pieces (a larger --piece-bytes)")
#: ``plan-fsdp``: one simulated FSDP2 step is one pass over the graph's ops; the planner tries a few unit
#: granularities × (units + 1) reshard choices × 5 prefetch schedules (the examples: under 2 M).
PLAN_FSDP = Budget("simulated op-steps", 20_000_000, "--units (fewer granularities), or a smaller model")
#: ``replay-batch``: one worker's step under one policy is a worker-step; the replay keeps a row of each
#: (~1 kB), so 10 M are about 10 GB at most and a few minutes (``make demo``: 4 × 300 × 4 = 4,800).
REPLAY = Budget("replayed worker-steps", 10_000_000, "--iterations, --workers or --policy")


@dataclass(frozen=True)
class Work:
    """An estimate of work: the amount, how it was computed, and whether it is only a lower bound."""

    amount: int
    formula: str
    at_least: bool = False


def _n(x: int) -> str:
    """``1,372``; ``1.38e+18`` for huge counts; ``about 10^375`` beyond floats."""
    if x < 10**12:
        return f"{x:,}"
    if x.bit_length() < 1000:
        return f"{float(x):.3g}"
    return f"about 10^{len(str(x)) - 1}"


def _at_least(x: int) -> str:
    """A value for ``--max-work`` no smaller than ``x``: exact, or 3 digits rounded up (``1.39e18``)."""
    if x < 10**12:
        return str(x)
    exp = len(str(x)) - 3
    digits = str(-(-x // 10**exp))
    return f"{digits[0]}.{digits[1:]}e{exp + len(digits) - 1}"


def plural(n: int, word: str) -> str:
    """``1 worker``, ``10,000 workers``."""
    return f"{_n(n)} {word}{'' if n == 1 else 's'}"


def simulate_work(ops: int | None, workers: int, iterations: int, runs: int = 1) -> Work:
    """Op-steps of ``runs`` simulations of ``workers × iterations`` (:data:`SIMULATE`).

    Parameters
    ----------
    ops : int or None
        Ops in the graph; ``None`` before the model is loaded (a lower bound of one op).
    workers, iterations : int
    runs : int
        Whole simulations (``--compare`` adds one per order, five for random).
    """
    per_row = (ops if ops is not None else 1) + ROW_COST_OPS
    what = f"{_n(ops)} ops" if ops is not None else "the model's ops"
    return Work(workers * iterations * per_row * runs,
                f"{plural(workers, 'worker')} × {plural(iterations, 'iteration')} × "
                f"({what} + {ROW_COST_OPS} per worker-iteration) × {plural(runs, 'run')}",
                at_least=ops is None)


def profile_work(compute_ops: int | None, runs: int, warmup: int) -> Work:
    """Op runs of profiling (:data:`PROFILE`); ``compute_ops=None`` before the model is loaded."""
    ops = compute_ops if compute_ops is not None else 1
    what = f"{_n(compute_ops)} compute ops" if compute_ops is not None else "the model's compute ops"
    return Work(ops * (runs + warmup), f"{what} × ({_n(runs)} runs + {_n(warmup)} warm-up)",
                at_least=compute_ops is None)


def cluster_work(orders: int, iterations: int, warmup: int) -> Work:
    """Real iterations of ``validate``'s interleaved job (:data:`CLUSTER`): two calibration slots and
    every order, for the warm-up rounds and the measured ones.

    Examples
    --------
    >>> cluster_work(4, 20, 2).amount
    132
    """
    return Work((orders + 2) * (iterations + warmup),
                f"({plural(orders, 'order')} + 2 calibration slots) × ({_n(iterations)} measured + {_n(warmup)} "
                "warm-up rounds)")


def ranks_work(ranks: int, what: str = "rank processes") -> Work:
    """Processes a real job starts at once (:data:`RANKS`).

    >>> ranks_work(10_000, "10,000 workers + 1 server").amount
    10000
    """
    return Work(ranks, what)


def real_steps_work(ranks: int, iterations: int, jobs: int = 1) -> Work:
    """Rank-steps of ``jobs`` real jobs of ``ranks`` processes running ``iterations`` steps (:data:`REAL_STEPS`).

    >>> real_steps_work(4, 50, 3).amount
    600
    """
    return Work(ranks * iterations * jobs,
                f"{plural(ranks, 'rank')} × {plural(iterations, 'iteration')} × {plural(jobs, 'job')}")


def replay_work(workers: int, iterations: int, policies: int) -> Work:
    """Worker-steps of a replay (:data:`REPLAY`).

    >>> replay_work(4, 300, 4).amount
    4800
    """
    return Work(workers * iterations * policies,
                f"{plural(workers, 'worker')} × {plural(iterations, 'iteration')} × {_n(policies)} "
                f"{'policy' if policies == 1 else 'policies'}")


def exact_work(channels: Iterable[Sequence]) -> Work:
    """Leaves of the exact search (:data:`EXACT`): per server, its transfers' distinct orders.

    Parameters
    ----------
    channels : iterable of sequences
        For every server channel, one hashable *class* per transfer;
        transfers of one class are interchangeable and counted once
        (``k! / Π m_c!`` orders for ``k`` transfers in classes of sizes ``m_c``).

    Examples
    --------
    >>> exact_work([["a", "b", "c"], ["x", "x"]]).amount   # 3! · 2!/2!
    6
    """
    total, sizes = 1, []
    for classes in channels:
        classes = list(classes)
        orders = math.factorial(len(classes))
        for m in Counter(classes).values():
            orders //= math.factorial(m)
        total *= orders
        sizes.append(len(classes))
    per = " × ".join(f"{k}!" for k in sizes) or "1"
    return Work(total, f"{sum(sizes)} transfers on {len(sizes)} server channel(s): at most {per} orders, "
                       "interchangeable transfers counted once")


def batch_search_work(caps: Sequence[int], global_batch: int) -> Work:
    """Curve values the exact batch split evaluates (:data:`PLAN_BATCH`): ``Σ_i (min(cap_i, X) + 1)``."""
    return Work(sum(min(int(c), global_batch) + 1 for c in caps),
                f"{plural(len(caps), 'worker')} × up to {_n(global_batch)} samples each")


def ddp_plan_work(ops: int, caps: int, pieces: Sequence[int], iterations: int) -> Work:
    """Op-steps of ``plan-ddp`` (:data:`PLAN_DDP`): ``ops`` per cap (and two more steps), and
    ``iterations × (ops + pieces)`` per piece size.

    >>> ddp_plan_work(100, 3, [10, 1000], 6).amount
    7760
    """
    amount = ops * (caps + 2) + sum(iterations * (ops + p) for p in pieces)
    return Work(amount, f"{_n(ops)} ops × {plural(caps + 2, 'step')} + {plural(iterations, 'iteration')} × "
                        f"(ops + pieces) for {plural(len(pieces), 'piece size')}, up to {_n(max(pieces, default=0))} "
                        "pieces each")


def fsdp_plan_work(ops: int, unit_counts: Sequence[int], schedules: int) -> Work:
    """Op-steps of ``plan-fsdp`` (:data:`PLAN_FSDP`): ``ops`` per simulated step, ``(k + 1) × schedules`` steps
    for a granularity of ``k`` units.

    >>> fsdp_plan_work(100, [4, 12], 5).amount
    9000
    """
    steps = sum((k + 1) * schedules for k in unit_counts)
    grains = f"{len(unit_counts)} unit granularit{'y' if len(unit_counts) == 1 else 'ies'}"
    return Work(ops * steps, f"{_n(ops)} ops × {plural(steps, 'simulated step')} ({grains}, up to "
                             f"{_n(max(unit_counts, default=0))} units)")


def table_work(rows: int) -> Work:
    """Rows of a table (:data:`CLUSTER_TABLE`)."""
    return Work(rows, f"one row per device count from 1 to {_n(rows)}")


def check_work(work: Work, budget: Budget, what: str = "", max_work: int | None = None,
               alternative: str = "") -> Work:
    """Return ``work`` if it fits the budget; otherwise raise a :class:`WorkLimitError`.

    Parameters
    ----------
    work : Work
    budget : Budget
    what : str
        What would run, for the message (``"simulate"``).
    max_work : int, optional
        ``--max-work``: replaces ``budget.limit`` when given.
    alternative : str
        Another way out, appended to the message (e.g. ``--time-limit``).

    Raises
    ------
    WorkLimitError
        ``work.amount`` above the limit (exit 2; the message names the
        estimate, the limit, the options it grows with and ``--max-work``).
    """
    limit = budget.limit if max_work is None else int(max_work)
    if work.amount <= limit:
        return work
    source = f"the limit of {_n(limit)}" + (f" set by {MAX_WORK_OPTION}" if max_work is not None else "")
    # one paragraph: what, how much and why, then every way out
    raise WorkLimitError(
        f"{what or 'this command'} would take {'at least' if work.at_least else 'about'} {_n(work.amount)} "
        f"{budget.unit} ({work.formula}), above {source}. Lower {budget.grows_with}"
        + (f"; {alternative}" if alternative else "")
        + f"; or, if you mean it, raise the limit with {MAX_WORK_OPTION} "
        + (f"(more than {_at_least(work.amount)} for this model)." if work.at_least
           else f"{_at_least(work.amount)} (or more)."))
