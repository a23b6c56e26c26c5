"""PNG of online batch sizes and times over iterations, one line per worker, one column per policy.

Top row: each worker's batch size. Bottom row: each worker's busy time, with
the iteration time (the slowest worker) in black and, when given, the
balanced optimum dashed. matplotlib is imported lazily with the Agg backend;
the file is written atomically.
"""
from __future__ import annotations

from pathlib import Path

from dlsched.atomic import atomic_path


def plot_batches(steps, path: str | Path, *, iterations=None, title: str | None = None, dpi: int = 110) -> None:
    """Render per-worker batch sizes and times over iterations.

    Parameters
    ----------
    steps : pandas.DataFrame
        Columns ``policy``, ``iteration``, ``worker``, ``batch``, ``time`` (seconds).
    path : str or Path
        The PNG.
    iterations : pandas.DataFrame, optional
        Columns ``policy``, ``iteration``, ``iteration_time`` and optionally ``optimum``.
    title : str, optional

    Examples
    --------
    >>> import pandas as pd, tempfile, pathlib
    >>> steps = pd.DataFrame({"policy": "bsp", "iteration": [0, 0, 1, 1], "worker": [0, 1, 0, 1],
    ...                       "batch": [8, 8, 8, 8], "time": [0.1, 0.2, 0.1, 0.2]})
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "b.png"
    >>> plot_batches(steps, path)
    >>> path.read_bytes()[:4]
    b'\x89PNG'
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(steps["policy"]))
    fig, axes = plt.subplots(2, len(policies), figsize=(4.2 * len(policies) + 1, 6), sharex=True, squeeze=False)
    for col, policy in enumerate(policies):
        mine = steps[steps.policy == policy]
        top, bottom = axes[0][col], axes[1][col]
        for worker, g in mine.groupby("worker"):
            top.plot(g.iteration, g.batch, lw=1, drawstyle="steps-post", label=f"worker {worker}")
            bottom.plot(g.iteration, g.time, lw=0.8, alpha=0.8)
        if iterations is not None:
            it = iterations[iterations.policy == policy]
            bottom.plot(it.iteration, it.iteration_time, color="black", lw=1.2, label="iteration time")
            if "optimum" in it:
                bottom.plot(it.iteration, it.optimum, color="black", lw=1, ls="--", label="balanced optimum")
            bottom.legend(fontsize=7, loc="upper right")
        top.set_title(policy, fontsize=10)
        bottom.set_xlabel("iteration")
        if col == 0:
            top.set_ylabel("batch size (samples)")
            bottom.set_ylabel("time (s)")
            if mine.worker.nunique() <= 8:
                top.legend(fontsize=7, loc="upper right")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)
