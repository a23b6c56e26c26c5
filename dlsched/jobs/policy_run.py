"""A real parameter-server run under a batch-size policy, on workers whose CPU may be throttled, summarised.

:func:`train_with_policy` builds the :class:`~dlsched.runtime.ps_config.PSConfig`,
runs it (under cgroup quotas with :func:`~dlsched.jobs.throttled_run.train_throttled`
when quotas are given) and returns one JSON-ready dict: the per-iteration
history of server 0's batch-size manager, the phases between quota changes
with their settled iteration times, and what the quotas predict for a time
linear in the batch (``t_i(b) = b / (v·q_i)``): the split proportional to
the quotas and the BSP/LB-BSP time ratio ``Σq / (n·min q)``.

Examples
--------
>>> quota_prediction(64, [0.5, 0.25, 0.125, 0.125])
{'split': [32, 16, 8, 8], 'bsp_over_lbbsp': 2.0}
>>> settled([1.0, 5.0, 2.0, 2.0, 3.0], 0, 5)
2.0
"""
from __future__ import annotations

import statistics

from dlsched.errors import DlschedError

#: fraction of a phase's iterations (from its start) left out of its settled time: the policy is converging
SETTLE_SKIP = 0.5


def quota_prediction(global_batch: int, quotas: list[float]) -> dict:
    """The split proportional to the quotas and the BSP/LB-BSP time ratio they predict (time ∝ b / q_i)."""
    from dlsched.planning.hetero import split_proportional
    n = len(quotas)
    return {"split": split_proportional(global_batch, list(quotas)),
            "bsp_over_lbbsp": round(sum(quotas) / (n * min(quotas)), 6)}


def settled(times: list[float], start: int, stop: int, skip: float = SETTLE_SKIP) -> float:
    """The median of ``times[start:stop]`` after leaving out its first ``skip`` part."""
    first = start + int((stop - start) * skip)
    return statistics.median(times[first:stop])


def phases(history: list[dict], applied: list) -> list[dict]:
    """The run's phases between quota changes: first and last iteration, the quotas, the settled
    iteration time (:func:`settled`) and the last split of the phase."""
    times = [e["time"] for e in history]
    starts = [(max(0, it), shares) for it, shares in applied] or [(0, None)]
    out = []
    for i, (start, shares) in enumerate(starts):
        stop = starts[i + 1][0] if i + 1 < len(starts) else len(history)
        if stop <= start:
            continue
        out.append({"first": start, "last": stop - 1, "quotas": shares, "settled_time": settled(times, start, stop),
                    "split": history[stop - 1]["sizes"]})
    return out


def check_quotas(quotas, swaps, workers: int) -> None:
    """Refuse quotas that are not one positive share per worker, before anything starts.

    Raises
    ------
    DlschedError
    """
    if quotas is None:
        if swaps:
            raise DlschedError("--swap-at swaps CPU quotas: give them with --cpu-quota")
        return
    if len(quotas) != workers:
        raise DlschedError(f"{len(quotas)} CPU quotas for {workers} workers; give one per worker")
    bad = [q for q in quotas if not q > 0]
    if bad:
        raise DlschedError(f"a CPU quota is a share of one core above 0 (e.g. 0.25), got {bad[0]:g}")


def train_with_policy(model: str, *, workers: int = 4, servers: int = 1, global_batch: int = 64,
                      policy: str = "bsp", predictor: str = "ema", quotas: list[float] | None = None,
                      swaps: list[str] = (), iterations: int = 50, lr: float = 0.01, window: int | None = None,
                      seed: int = 0, timeout: float = 60.0, policy_options: dict | None = None) -> dict:
    """Train ``model`` for real with ``workers`` workers and ``servers`` servers under ``policy``.

    Parameters
    ----------
    model : str
        A factory spec (``examples/torch_models.py:small_cnn``).
    quotas : list of float, optional
        Cores each worker may use (cgroup ``cpu.cfs_quota_us``); none: unthrottled.
    swaps : list of str
        ``ITERATION:I,J``: workers ``I`` and ``J`` swap quotas at that iteration.
    window : int, optional
        Parameter sends in flight per worker (default: all, so a throttled
        worker's slow receives do not hold back the others' parameters).
    policy_options : dict, optional
        Extra options of the policy (``lbbsp-gpu``: ``delta``, ``window`` ...).

    Returns
    -------
    dict
        ``config`` (the settings), ``history`` (per iteration: ``sizes``,
        ``busy``, ``cpu``, ``mem``, ``time``, ``predicted``), ``applied``
        (``[iteration, quotas]`` of each quota change as it took effect),
        ``phases`` (:func:`phases`), ``prediction`` (:func:`quota_prediction`,
        with quotas) and ``warnings`` (the policy's).

    Raises
    ------
    DlschedError
        Bad settings (an unknown policy, quotas for another number of workers, a quota ≤ 0 ...),
        no cgroups here while quotas are given, or the job failed.
    """
    from dlsched.runtime.ps_config import PSConfig, check_settings
    from dlsched.runtime.ps_model import order_from_module
    from .throttled_run import parse_changes, train_throttled
    check_quotas(quotas, swaps, workers)
    changes = parse_changes(list(swaps), quotas) if quotas else []
    options = dict(policy_options or {})
    if policy == "lbbsp-cpu":
        options.setdefault("predictor", predictor)
    settings = dict(servers=servers, workers=workers, iterations=iterations, batch=max(1, global_batch // workers),
                    global_batch=global_batch, batch_policy=policy, policy_options=options, lr=lr, seed=seed,
                    timeout=timeout)
    check_settings(**settings)  # before importing the model
    from dlsched.planning.batch_policies import make_policy
    make_policy(policy, global_batch, workers, seed=seed, **options)  # refuses its own bad settings
    order = order_from_module(model)
    cfg = PSConfig(model=model, order=order, window=window or len(order), **settings)
    if quotas:
        res = train_throttled(cfg, list(quotas), changes)
        run, applied = res.run, res.applied
    else:
        from dlsched.hooks.torch_ps import launch_local
        run, applied = launch_local(cfg), []
    history = run.batches["batches"]
    out = {"config": {"model": model, "workers": workers, "servers": servers, "global_batch": global_batch,
                      "policy": policy, "options": options, "quotas": quotas, "swaps": list(swaps),
                      "iterations": iterations},
           "history": history, "applied": [[it, shares] for it, shares in applied],
           "phases": phases(history, applied), "warnings": run.batches["batch_warnings"]}
    if quotas:
        out["prediction"] = quota_prediction(global_batch, quotas)
    return out


def frames(runs: dict):
    """``(steps, iterations)`` DataFrames of runs ``{label: train_with_policy(...)}`` for
    :func:`dlsched.formats.batch_plot.plot_batches` (one column per label)."""
    import pandas as pd
    steps, iters = [], []
    for label, r in runs.items():
        for e in r["history"]:
            iters.append({"policy": label, "iteration": e["iteration"], "iteration_time": e["time"]})
            steps += [{"policy": label, "iteration": e["iteration"], "worker": w, "batch": b, "time": t}
                      for w, (b, t) in enumerate(zip(e["sizes"], e["busy"]))]
    return pd.DataFrame(steps), pd.DataFrame(iters)
