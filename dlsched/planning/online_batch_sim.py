"""Replaying per-worker speed traces against online batch-size policies (DESIGN §5.1, paper ``002_*``).

A :class:`SpeedTrace` gives, for every iteration ``k`` and worker ``i``, the
worker's time curve ``t_i^k(b) = a_i^k + s_i^k·b`` (fixed cost ``a`` in
seconds, ``s`` seconds per sample), the readings a batch-size manager sees
(``cpu``: share of a core available, ``mem``: fraction of memory used), and a
hidden factor on the time (noise, transient spikes) that no reading shows.
A worker given no samples takes no time.

:func:`simulate_policies` runs each policy over the trace: at each boundary
the policy gets the last batches, the busy times and the current readings,
and returns the next batches. The iteration time is the slowest worker's
time; the balanced optimum of iteration ``k`` is the exact split
(:func:`dlsched.planning.hetero.split_exact`) of the trace's curves without
the hidden factor. Results are pandas DataFrames.

Examples
--------
>>> trace = scenario_trace("step", workers=2, iterations=20)
>>> res = simulate_policies(trace, ["bsp", "lbbsp-cpu:memoryless"], 40)
>>> res.summary()[["policy", "mean_iteration_s"]].round(3).values.tolist()
[['bsp', 0.55], ['lbbsp-cpu:memoryless', 0.45]]
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlsched.errors import DlschedError
from .batch_policies import make_policy
from .hetero import split_exact

SCENARIOS = ("fig8", "step", "periodic", "random", "table3")


@dataclass
class SpeedTrace:
    """Per-iteration, per-worker time curves, readings and hidden time factors; arrays of shape (iterations, workers).

    Attributes
    ----------
    overhead, per_sample : numpy.ndarray
        ``a`` (s) and ``s`` (s/sample) of ``t = (a + s·b)·hidden``.
    cpu, mem : numpy.ndarray
        Readings available at the boundary before the iteration.
    hidden : numpy.ndarray
        Factor on the time that no reading shows (noise, spikes); 1 without.
    description : str
        The trace in words.
    """

    overhead: np.ndarray
    per_sample: np.ndarray
    cpu: np.ndarray
    mem: np.ndarray
    hidden: np.ndarray
    description: str = ""
    name: str = "trace"

    def __post_init__(self):
        shape = np.shape(self.per_sample)
        for key in ("overhead", "per_sample", "cpu", "mem", "hidden"):
            arr = np.asarray(getattr(self, key), dtype=float)
            if arr.shape != shape or len(shape) != 2:
                raise DlschedError(f"trace {self.name!r}: {key} has shape {arr.shape}, expected {shape}")
            if not np.isfinite(arr).all() or (arr < 0).any():
                raise DlschedError(f"trace {self.name!r}: {key} holds negative or non-finite values")
            setattr(self, key, arr)
        if (self.per_sample <= 0).any():
            raise DlschedError(f"trace {self.name!r}: every worker needs a positive time per sample (a speed)")

    @property
    def iterations(self) -> int:
        return self.per_sample.shape[0]

    @property
    def workers(self) -> int:
        return self.per_sample.shape[1]

    def times(self, k: int, batches) -> np.ndarray:
        """Realised busy times of iteration ``k`` (hidden factor included; 0 for an idle worker)."""
        b = np.asarray(batches, dtype=float)
        return np.where(b > 0, (self.overhead[k] + self.per_sample[k] * b) * self.hidden[k], 0.0)

    def optimum_time(self, k: int, global_batch: int, caps=None) -> float:
        """:meth:`optimum`'s time, by bisection on ``T`` for these affine curves (no per-sample table).

        Worker ``i`` fits ``n_i(T) = min(bmax_i, ⌊(T − a_i)/s_i⌋)`` samples in ``T`` (none if that is below 1);
        the smallest ``T`` with ``Σ n_i(T) ≥ X`` is found to float precision and snapped down to the largest
        ``a_i + s_i·n_i`` it admits, a value the curves take.
        """
        a, s = self.overhead[k], self.per_sample[k]
        cap = np.full(self.workers, float(global_batch)) if caps is None else np.asarray(caps, dtype=float)

        def fit(T):
            n = np.minimum(cap, np.floor((T - a) / s + 1e-9))
            return np.where(n >= 1, n, 0.0)

        if fit((a + s * cap).max()).sum() < global_batch:
            raise DlschedError(f"global batch {global_batch} does not fit the workers' largest batches")
        lo, hi = 0.0, float((a + s * cap).max())
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if fit(mid).sum() >= global_batch else (mid, hi)
            if hi - lo <= 1e-12 * hi:
                break
        n = fit(hi)
        return float(np.where(n > 0, a + s * n, 0.0).max())

    def optimum(self, k: int, global_batch: int, caps=None) -> tuple[list[int], float]:
        """The balanced optimum of iteration ``k``: exact split of the curves without the hidden factor."""
        a, s = self.overhead[k], self.per_sample[k]
        curves = [lambda b, a=a[i], s=s[i]: a + s * np.asarray(b, dtype=float) for i in range(self.workers)]
        split = split_exact(global_batch, curves, caps)
        b = np.asarray(split, dtype=float)
        return split, float(np.where(b > 0, a + s * b, 0.0).max())


def _flat(n, k, value):
    return np.full((k, n), float(value))


def fig8_trace(iterations: int = 400, noise: float = 0.0, slow_at: int | None = 150, slow_by: float = 0.3,
               seed: int = 0) -> SpeedTrace:
    """The paper's Fig. 8 cluster (V100, M60, K80, K520) as affine curves ``t_i(b) = a_i + s_i·b``.

    ``a = (0.82, 0.97, 1.00, 1.14)`` s and ``s = (0.5/57, 0.03, 0.05, 2/26)``
    s/sample encode "K520 32→6 saves about 2 s" and "V100 32→89 costs
    0.5 s"; the optimum of ``X = 128`` is (89, 21, 12, 6) at 1.602 s. The
    second worker's fixed cost grows by ``slow_by`` from ``slow_at``
    (optimum then (96, 13, 13, 6)); ``noise`` is the σ of a lognormal factor.
    """
    a = np.tile([0.82, 0.97, 1.00, 1.14], (iterations, 1))
    s = np.tile([0.5 / 57, 0.03, 0.05, 2 / 26], (iterations, 1))
    if slow_at is not None and slow_at < iterations:
        a[slow_at:, 1] += slow_by
    rng = np.random.default_rng(seed)
    hidden = np.exp(rng.normal(0, noise, a.shape)) if noise > 0 else np.ones(a.shape)
    desc = (f"paper Fig. 8: 4 GPU workers, t_i(b) = a_i + s_i·b, a = (0.82, 0.97, 1.00, 1.14) s, "
            f"s = (0.5/57, 0.03, 0.05, 2/26) s/sample; lognormal noise σ = {noise:g}"
            + (f"; worker 1 slower by {slow_by:g} s from iteration {slow_at}" if slow_at is not None else ""))
    return SpeedTrace(a, s, _flat(4, iterations, 1), _flat(4, iterations, 0.5), hidden, desc, "fig8")


def table3_trace(workers: int = 32, iterations: int = 2000, seed: int = 0, dwell: float = 80.0,
                 spike_p: float = 0.05, noise: float = 0.03) -> SpeedTrace:
    """A non-dedicated CPU cluster in the manner of the paper's Cluster-B (Table 3).

    - Base speeds: four machine kinds, 20, 30, 40 and 60 samples/s at a full
      core, in equal numbers (worker ``i`` is kind ``i mod 4``).
    - CPU available ``c ∈ {1, 0.75, 0.5, 0.25}``: a Markov chain per worker,
      leaving its state with probability ``1/dwell`` per iteration for one of
      the other three (uniform); the speed is proportional to ``c`` (§3.2.1).
    - Memory used: a per-worker level in [0.3, 0.6] with ±0.02 jitter, and
      memory-pressure episodes (start probability 1/300 per iteration, mean
      length 40 iterations) at a level in [0.9, 0.98]; the speed is divided by
      ``1 + 8·max(0, m − 0.85)`` (paging: ×0.71 at 0.9, ×0.49 at 0.98).
    - Transient spikes: with probability ``spike_p`` a worker's time is
      multiplied by U(1.5, 3) for one iteration; no reading shows them.
    - Noise: a lognormal factor on every time, σ = ``noise``.
    CPU workers have no fixed cost: ``t = b / v``.
    """
    rng = np.random.default_rng(seed)
    levels = np.array([1.0, 0.75, 0.5, 0.25])
    state = rng.integers(0, 4, workers)
    cpu = np.empty((iterations, workers))
    mem = np.empty((iterations, workers))
    base_mem = rng.uniform(0.3, 0.6, workers)
    episode = np.zeros(workers, dtype=int)
    level = np.zeros(workers)
    for k in range(iterations):
        move = rng.random(workers) < 1 / dwell
        state = np.where(move, (state + rng.integers(1, 4, workers)) % 4, state)
        cpu[k] = levels[state]
        start = (episode == 0) & (rng.random(workers) < 1 / 300)
        level = np.where(start, rng.uniform(0.9, 0.98, workers), level)
        episode = np.where(start, rng.geometric(1 / 40, workers), np.maximum(episode - 1, 0))
        mem[k] = np.where(episode > 0, level, base_mem + rng.uniform(-0.02, 0.02, workers))
    base = np.array([20.0, 30.0, 40.0, 60.0])[np.arange(workers) % 4]
    speed = base * cpu / (1 + 8 * np.maximum(0, mem - 0.85))
    spikes = np.where(rng.random((iterations, workers)) < spike_p, rng.uniform(1.5, 3, (iterations, workers)), 1.0)
    hidden = spikes * np.exp(rng.normal(0, noise, (iterations, workers)))
    desc = (f"{workers} CPU workers, base 20/30/40/60 samples/s; CPU share in {{1, .75, .5, .25}} as a Markov chain "
            f"(dwell {dwell:g}); memory-pressure episodes (m 0.9-0.98, speed / (1 + 8(m - 0.85))); "
            f"{spike_p:.0%} transient spikes (time x U(1.5, 3)) invisible to the readings; {noise:.0%} lognormal noise")
    return SpeedTrace(np.zeros_like(speed), 1 / speed, cpu, mem, hidden, desc, "table3")


def scenario_trace(name: str, workers: int = 4, iterations: int = 300, seed: int = 0, noise: float = 0.0) -> SpeedTrace:
    """A built-in trace: ``fig8``, ``table3``, or on ``workers`` affine workers (fixed cost 0.05 s,
    ``s_i = 0.01·(i + 1)`` s/sample):

    - ``step``: worker 0's time per sample triples from the middle iteration on;
    - ``periodic``: a co-located job takes half of the last worker's CPU for 20 of every 40 iterations;
    - ``random``: 5% lognormal noise and 5% transient spikes (time ×2).

    Raises
    ------
    DlschedError
        An unknown name, fewer than 2 workers or iterations.

    Examples
    --------
    >>> scenario_trace("periodic", workers=3, iterations=80).cpu[:41:20, 2].tolist()
    [1.0, 0.5, 1.0]
    """
    if name not in SCENARIOS:
        raise DlschedError(f"unknown speed-trace scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    if workers < 2 or iterations < 2:
        raise DlschedError(f"a speed trace needs at least 2 workers and 2 iterations, got {workers} and {iterations}")
    if name == "fig8":
        if workers != 4:
            raise DlschedError(f"the fig8 scenario has 4 workers, not {workers}")
        return fig8_trace(iterations, noise=noise, seed=seed)
    if name == "table3":
        return table3_trace(workers, iterations, seed)
    rng = np.random.default_rng(seed)
    a = _flat(workers, iterations, 0.05)
    s = np.tile(0.01 * (np.arange(workers) + 1.0), (iterations, 1))
    cpu, hidden = _flat(workers, iterations, 1), np.exp(rng.normal(0, noise, (iterations, workers)))
    if name == "step":
        s[iterations // 2:, 0] *= 3
        cpu[iterations // 2:, 0] = 1 / 3
        desc = f"worker 0's time per sample triples at iteration {iterations // 2}"
    elif name == "periodic":
        on = (np.arange(iterations) % 40) >= 20
        s[on, -1] *= 2
        cpu[on, -1] = 0.5
        desc = f"a co-located job takes half of worker {workers - 1}'s CPU for 20 of every 40 iterations"
    else:
        hidden *= np.exp(rng.normal(0, 0.05, hidden.shape)) * np.where(rng.random(hidden.shape) < 0.05, 2.0, 1.0)
        desc = "5% lognormal noise and 5% transient spikes (time x2), invisible to the readings"
    desc = f"{workers} workers t_i(b) = 0.05 + 0.01(i+1)·b s; " + desc + (f"; noise σ = {noise:g}" if noise else "")
    return SpeedTrace(a, s, cpu, _flat(workers, iterations, 0.5), hidden, desc, name)


def read_trace(path) -> SpeedTrace:
    """A measured trace from a CSV file: one row per (iteration, worker).

    Columns: ``iteration``, ``worker`` (0..n−1), then either ``batch`` and
    ``time`` (busy seconds) or ``speed`` (samples/s); optional ``overhead``
    (s, default 0), ``cpu`` (default 1) and ``mem`` (default 0). Worker ``i``
    at iteration ``k`` is replayed as ``t = overhead + b / speed``; where it ran
    no samples (batch 0), its nearest measured speed stands in.

    Raises
    ------
    DlschedError
        Unreadable file, missing columns, missing (iteration, worker) rows or
        values (NaN), non-positive speeds.
    """
    import pandas as pd

    try:
        df = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise DlschedError(f"cannot read the speed trace {path}: {exc}") from None
    cols = set(df.columns)
    if not {"iteration", "worker"} <= cols or not ({"speed"} <= cols or {"batch", "time"} <= cols):
        raise DlschedError(f"speed trace {path} needs columns iteration, worker and either speed or batch and time; "
                           f"it has {', '.join(map(str, df.columns))}")
    try:
        df = df.apply(pd.to_numeric)
    except (ValueError, TypeError) as exc:
        raise DlschedError(f"speed trace {path} holds a non-numeric value: {exc}") from None
    # A missing measurement is not invented from its neighbours (only a batch of 0, which has no speed, is).
    gaps = df.isna()
    if gaps.any(axis=None):
        row = int(np.flatnonzero(gaps.any(axis=1).to_numpy())[0])
        missing = ", ".join(map(str, df.columns[gaps.iloc[row].to_numpy()]))
        raise DlschedError(f"speed trace {path}: {int(gaps.any(axis=1).sum())} row(s) miss a value or hold NaN "
                           f"(the first, data row {row + 1}: {missing}); every row needs every value, measured. "
                           "Re-record those iterations, or drop them for every worker")
    try:
        if "speed" not in cols:
            df["speed"] = df["batch"] / (df["time"] - df.get("overhead", 0.0))
        k, w = df["iteration"].astype(int), df["worker"].astype(int)
    except (ValueError, TypeError) as exc:
        raise DlschedError(f"speed trace {path} holds a non-numeric value: {exc}") from None
    iters, workers = sorted(set(k)), sorted(set(w))
    if workers != list(range(len(workers))) or len(df) != len(iters) * len(workers) or df.duplicated(
            ["iteration", "worker"]).any():
        raise DlschedError(f"speed trace {path} must have exactly one row per iteration and worker 0..n-1")

    def grid(col, default):
        vals = df[col] if col in df else pd.Series(default, index=df.index)
        g = vals.groupby([k, w]).first().unstack()
        return g.to_numpy(dtype=float)

    speed = grid("speed", np.nan)
    if (speed < 0).any() or np.isinf(speed).any():
        raise DlschedError(f"speed trace {path}: every speed must be positive and finite")
    # a worker that ran no samples in an iteration (batch 0) has no speed there: its nearest measured one stands in
    speed = pd.DataFrame(np.where(speed > 0, speed, np.nan)).ffill().bfill().to_numpy()
    if not np.isfinite(speed).all():
        raise DlschedError(f"speed trace {path}: a worker never has a positive speed (samples over busy seconds)")
    return SpeedTrace(grid("overhead", 0.0), 1 / speed, grid("cpu", 1.0), grid("mem", 0.0),
                      np.ones_like(speed), f"measured trace {path}", str(path))


def _parse(spec: str) -> tuple[str, dict]:
    name, _, predictor = spec.partition(":")
    return name, ({"predictor": predictor} if predictor else {})


@dataclass
class OnlineSimResult:
    """What :func:`simulate_policies` measured.

    Attributes
    ----------
    steps : pandas.DataFrame
        One row per (policy, iteration, worker): batch, time, speed, predicted (speed, NaN if none).
    iterations : pandas.DataFrame
        One row per (policy, iteration): iteration_time, optimum, gap (``time / optimum − 1``).
    trace : SpeedTrace
    global_batch : int
    warnings, phases : dict
        Per policy: its warnings; ``lbbsp-gpu``'s boundary of entering fine-tune.
    """

    steps: object
    iterations: object
    trace: SpeedTrace
    global_batch: int
    warnings: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)

    def rmse(self):
        """Per policy, RMSE (samples/s) of the predicted against the realised speed, workers that ran only."""
        s = self.steps.dropna(subset=["predicted"])
        s = s[s.batch > 0]
        return ((s.predicted - s.speed) ** 2).groupby(s.policy, sort=False).mean() ** 0.5

    def summary(self):
        """Per policy: mean iteration time, its ratio to ``bsp`` (when run), the gap to the optimum, RMSE, final
        split."""
        import pandas as pd

        it, rmse = self.iterations, self.rmse()
        tail = it[it.iteration >= int(0.9 * self.trace.iterations)]
        bsp = it[it.policy == "bsp"].iteration_time.mean() if (it.policy == "bsp").any() else np.nan
        last = self.steps[self.steps.iteration == self.trace.iterations - 1]
        rows = []
        for p, g in it.groupby("policy", sort=False):
            rows.append({"policy": p, "mean_iteration_s": g.iteration_time.mean(),
                         "vs_bsp": g.iteration_time.mean() / bsp, "mean_gap": g.gap.mean(),
                         "final_gap": tail[tail.policy == p].gap.mean(), "rmse": rmse.get(p, np.nan),
                         "final_batches": last[last.policy == p].batch.tolist(),
                         "fine_tune_at": self.phases.get(p), "warnings": list(self.warnings.get(p, []))})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        summary = self.summary().replace({np.nan: None}).to_dict("records")
        return {"trace": self.trace.description, "workers": self.trace.workers,
                "iterations": self.trace.iterations, "global_batch": self.global_batch, "policies": summary}


def simulate_policies(trace: SpeedTrace, policies, global_batch: int, *, caps=None, seed: int = 0,
                      options: dict | None = None) -> OnlineSimResult:
    """Run each policy over ``trace``.

    Parameters
    ----------
    trace : SpeedTrace
    policies : sequence of str
        ``name`` or ``name:predictor`` (``lbbsp-cpu:narx``); ``static`` plans on iteration 0's curves.
    global_batch : int
    caps : sequence of int, optional
    seed : int
    options : dict, optional
        Extra keyword options per policy spec.

    Raises
    ------
    DlschedError
        An unknown policy or predictor, caps for another number of workers, an infeasible global batch.
    """
    import pandas as pd

    if caps is not None and len(caps) != trace.workers:
        raise DlschedError(f"{len(caps)} memory caps for a trace of {trace.workers} workers")
    K, n = trace.iterations, trace.workers
    opt_time, last_key, last_val = np.empty(K), None, 0.0
    for k in range(K):
        key = (trace.overhead[k].tobytes(), trace.per_sample[k].tobytes())
        if key != last_key:
            last_key, last_val = key, trace.optimum_time(k, global_batch, caps)
        opt_time[k] = last_val
    steps, iters, warnings, phases = [], [], {}, {}
    for spec in dict.fromkeys(policies):  # a policy named twice runs once
        name, extra = _parse(spec)
        extra.update((options or {}).get(spec, {}))
        if name == "static" and "static_split" not in extra:
            extra.setdefault("curves", [lambda b, a=trace.overhead[0, i], s=trace.per_sample[0, i]:
                                        a + s * np.asarray(b, dtype=float) for i in range(n)])
        policy = make_policy(name, global_batch, n, caps=caps, seed=seed, **extra)
        B, T, P = np.empty((K, n)), np.empty((K, n)), np.full((K, n), np.nan)
        b = policy.initial_sizes()
        for k in range(K):
            B[k] = b
            T[k] = trace.times(k, b)
            if k + 1 < K:
                readings = [{"cpu": c, "mem": m} for c, m in zip(trace.cpu[k + 1], trace.mem[k + 1])]
                b = policy.next_sizes(b, list(T[k]), readings)
                if policy.predicted is not None:
                    P[k + 1] = policy.predicted
        with np.errstate(divide="ignore", invalid="ignore"):
            V = np.where(B > 0, B / T, np.nan)
        it_time = T.max(axis=1)
        steps.append(pd.DataFrame({"policy": spec, "iteration": np.repeat(np.arange(K), n),
                                   "worker": np.tile(np.arange(n), K), "batch": B.ravel().astype(int),
                                   "time": T.ravel(), "speed": V.ravel(), "predicted": P.ravel()}))
        iters.append(pd.DataFrame({"policy": spec, "iteration": np.arange(K), "iteration_time": it_time,
                                   "optimum": opt_time, "gap": it_time / opt_time - 1}))
        warnings[spec] = list(policy.warnings)
        if getattr(policy, "fine_since", None) is not None:
            phases[spec] = policy.fine_since
    return OnlineSimResult(pd.concat(steps, ignore_index=True), pd.concat(iters, ignore_index=True), trace,
                           global_batch, warnings, phases)


DEFAULT_POLICIES = ("bsp", "static", "lbbsp-cpu:ema", "lbbsp-gpu")
