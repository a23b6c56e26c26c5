"""Cluster sizing: devices for a target speedup and parameter servers (paper ``003_*`` §3.2–3.3).

Lemma 3.1: with overhead ratio ``R_O = T_O / T_C`` (time that cannot be hidden
behind computation over computation time), ``G`` devices run at efficiency
``α = (1 + R_O) / (1 + G·R_O)``, a speedup of ``G·α``. The speedup grows with
``G`` towards ``1 + 1/R_O`` and never reaches it. Inverted, it gives the
largest ``R_O`` at which ``G`` devices keep a target efficiency.

Lemma 3.2: ``N_w`` workers pulling and pushing ``S_p`` bytes of parameters per
round over links of ``B_ps`` bytes/s hide that traffic behind a round of
computation ``T_C`` with ``N_ps = ⌈2·S_p·N_w / (B_ps·T_C)⌉`` parameter servers.

Examples
--------
>>> devices_needed(0.1, 3)
4
>>> devices_needed(0.1, 12) is None
True
>>> parameter_servers(180e6, 4, 10e9 / 8, 0.5)
3
>>> round(max_overhead_ratio(4, 0.8), 4)
0.0909
"""
from __future__ import annotations

import math

from dlsched.errors import DlschedError


def _check_ratio(overhead_ratio: float) -> None:
    if not (overhead_ratio >= 0) or not math.isfinite(overhead_ratio):
        raise DlschedError(f"--overhead-ratio must be a finite number ≥ 0, got {overhead_ratio}")


def scaling_efficiency(overhead_ratio: float, devices: int) -> float:
    """Lemma 3.1: the scaling efficiency ``α = (1 + R_O) / (1 + G·R_O)`` of ``devices`` devices.

    The fraction of linear speedup that ``G`` devices keep when ``R_O`` of
    each step's computation time cannot be hidden; 1 for one device.

    See Also
    --------
    parallel_speedup : ``G·α``, the speedup this efficiency gives.
    dlsched.analyses.bounds.schedule_efficiency : TicTac's ``E``, how well one
        iteration's transfers are scheduled; unrelated to the device count.

    Examples
    --------
    >>> scaling_efficiency(0.1, 1), round(scaling_efficiency(0.1, 4), 4)
    (1.0, 0.7857)
    """
    _check_ratio(overhead_ratio)
    if devices < 1:
        raise DlschedError(f"the device count must be ≥ 1, got {devices}")
    R = overhead_ratio
    return (1 + R) / (1 + devices * R)


def parallel_speedup(overhead_ratio: float, devices: int) -> float:
    """Lemma 3.1: ``G·α``, the speedup of ``devices`` devices over one device.

    See Also
    --------
    scaling_efficiency : ``α``, the same speedup per device.
    speedup_limit : what ``G·α`` approaches as ``G`` grows.
    dlsched.analyses.bounds.Bounds : its ``speedup`` is TicTac's best-case gain
        of a schedule over the serial one, not a device count's.

    Examples
    --------
    >>> round(parallel_speedup(0.1, 4), 4)
    3.1429
    """
    return devices * scaling_efficiency(overhead_ratio, devices)


def speedup_limit(overhead_ratio: float) -> float:
    """``1 + 1/R_O``, the supremum of ``G·α`` (``inf`` when ``R_O = 0``)."""
    _check_ratio(overhead_ratio)
    return math.inf if overhead_ratio == 0 else 1 + 1 / overhead_ratio


def devices_needed(overhead_ratio: float, target_speedup: float) -> int | None:
    """Smallest ``G`` with ``G·α ≥ target``; ``None`` when the target is unreachable.

    ``G·(1 + R) / (1 + G·R) ≥ S`` ⟺ ``G·(1 + R − S·R) ≥ S``, solvable iff
    ``S < 1 + 1/R``; then ``G = ⌈S / (1 + R − S·R)⌉``.

    Raises
    ------
    DlschedError
        A negative ratio or a target speedup that is not positive.
    """
    _check_ratio(overhead_ratio)
    if not (target_speedup > 0) or not math.isfinite(target_speedup):
        raise DlschedError(f"--target-speedup must be a positive number, got {target_speedup}")
    R, S = overhead_ratio, target_speedup
    if S <= 1:
        return 1
    if S >= speedup_limit(R):
        return None
    G = max(1, math.ceil(S / (1 + R - S * R) - 1e-9))
    # guard the float boundary both ways
    while G > 1 and parallel_speedup(R, G - 1) >= S:
        G -= 1
    while parallel_speedup(R, G) < S * (1 - 1e-12):
        G += 1
    return G


def max_overhead_ratio(devices: int, target_efficiency: float) -> float:
    """Lemma 3.1 inverted: the largest ``R_O`` at which ``devices`` devices keep ``target_efficiency``.

    ``α = (1 + R) / (1 + G·R)`` falls from 1 at ``R = 0`` towards ``1/G``, so
    ``α(R) ≥ a`` ⟺ ``a + a·G·R ≥ 1 + R`` ⟺ ``R·(a·G − 1) ≤ 1 − a``. For
    ``a·G > 1`` that is ``R ≤ (1 − a) / (a·G − 1)``; for ``a ≤ 1/G`` every
    ratio keeps the target and the answer is ``inf``.

    Raises
    ------
    DlschedError
        A device count below 1, or an efficiency outside (0, 1].

    Examples
    --------
    The paper's example, 4 GPUs at 80%:

    >>> round(max_overhead_ratio(4, 0.8), 4)
    0.0909
    >>> max_overhead_ratio(4, 0.25)
    inf
    """
    if devices < 1:
        raise DlschedError(f"--devices must be ≥ 1, got {devices}")
    if not (0 < target_efficiency <= 1):
        raise DlschedError(f"--target-efficiency must lie in (0, 1], e.g. 0.8 or 80%, got {target_efficiency}")
    G, a = devices, target_efficiency
    if a * G <= 1:
        return math.inf
    return (1 - a) / (a * G - 1)


def parameter_servers(param_bytes: float, workers: int, bandwidth: float, compute_time: float) -> int:
    """Lemma 3.2: ``N_ps = ⌈2·S_p·N_w / (B_ps·T_C)⌉``.

    Parameters
    ----------
    param_bytes : float
        ``S_p``, bytes of parameters pulled (and gradients pushed) per round.
    workers : int
        ``N_w``.
    bandwidth : float
        ``B_ps`` in bytes per second (per parameter server).
    compute_time : float
        ``T_C`` in seconds, one round of computation on a worker.

    Raises
    ------
    DlschedError
        Non-positive inputs.
    """
    if param_bytes <= 0 or workers < 1 or bandwidth <= 0 or compute_time <= 0:
        raise DlschedError(
            "the parameter-server lemma needs positive --param-bytes, --workers, --bandwidth and --compute-time "
            f"(got {param_bytes} B, {workers} workers, {bandwidth} B/s, {compute_time} s)")
    ratio = 2 * param_bytes * workers / (bandwidth * compute_time)
    return max(1, math.ceil(ratio - 1e-9))


def scaling_table(overhead_ratio: float, max_devices: int):
    """:func:`scaling_efficiency` and :func:`parallel_speedup` for 1..``max_devices`` devices.

    Returns a DataFrame with columns ``devices, efficiency, speedup``.
    """
    import pandas as pd

    if max_devices < 1:
        raise DlschedError(f"--max-devices must be ≥ 1, got {max_devices}")
    rows = [{"devices": g, "efficiency": scaling_efficiency(overhead_ratio, g),
             "speedup": parallel_speedup(overhead_ratio, g)}
            for g in range(1, max_devices + 1)]
    return pd.DataFrame(rows, columns=["devices", "efficiency", "speedup"])
