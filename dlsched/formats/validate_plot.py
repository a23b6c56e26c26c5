"""PNG of predicted against measured iteration times, per transfer order (``dlsched validate``; DESIGN §4.7).

Left: each order's measured mean iteration time (bar, with its p95 as a
whisker) beside the predicted mean under the chosen link model. Right, when
points are given: TicTac Fig. 12a, the normalised measured step time of every
iteration against the ``E`` of its replayed transfer order, with the fitted
line and its R². matplotlib is imported lazily with the Agg backend.
"""
from __future__ import annotations

from pathlib import Path

from dlsched.atomic import atomic_path


def write_validate_plot(report: dict, path: str | Path, points: list[tuple[float, float, str]] | None = None) -> None:
    """Write the figure of a ``validate`` report (:func:`dlsched.answers.validate.report`) to ``path``.

    Parameters
    ----------
    report : dict
        ``orders`` maps each order to ``measured_mean``, ``measured_p95``,
        ``predicted_mean`` (seconds); ``sharing``, ``model``, ``mode`` label the figure.
    points : list of (E, normalised step time, order), optional
        The Fig. 12a scatter; ``report["replay_fit"]`` gives its line.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> rep = {"model": "m", "mode": "inference", "sharing": "fair",
    ...        "orders": {"random": {"measured_mean": 1.0, "measured_p95": 1.2, "predicted_mean": 0.9}}}
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "v.png"
    >>> write_validate_plot(rep, p); p.stat().st_size > 0
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(report["orders"])
    rows = [report["orders"][n] for n in names]
    ncols = 2 if points else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 4), squeeze=False)
    ax = axes[0][0]
    x = np.arange(len(names))
    meas = [r["measured_mean"] * 1e3 for r in rows]
    p95 = [max(0.0, (r["measured_p95"] - r["measured_mean"]) * 1e3) for r in rows]
    pred = [r["predicted_mean"] * 1e3 for r in rows]
    ax.bar(x - 0.2, meas, 0.4, yerr=[[0] * len(p95), p95], capsize=3, label="measured (mean, p95)", color="#4C72B0")
    ax.bar(x + 0.2, pred, 0.4, label=f"predicted ({report.get('sharing', '')} links)", color="#DD8452")
    ax.set_xticks(x, names)
    ax.set_ylabel("iteration time (ms)")
    ax.set_title(f"{report.get('model', '')} {report.get('mode', '')}", fontsize=9)
    ax.legend(fontsize=8)
    if points:
        ax2 = axes[0][1]
        for order in dict.fromkeys(o for _, _, o in points):
            pts = [(e, t) for e, t, o in points if o == order]
            ax2.scatter([e for e, _ in pts], [t for _, t in pts], s=10, label=order)
        fit = report.get("replay_fit") or {}
        if fit.get("slope") == fit.get("slope") and fit.get("slope") is not None:
            xs = np.linspace(min(e for e, _, _ in points), max(e for e, _, _ in points), 2)
            ax2.plot(xs, fit["slope"] * xs + fit["intercept"], "k-", lw=1, label=f"fit, R² = {fit['r2']:.3f}")
        ax2.set_xlabel("E of the replayed transfer order")
        ax2.set_ylabel("normalised measured step time")
        ax2.set_title("TicTac Fig. 12a", fontsize=9)
        ax2.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
