"""Gantt chart (PNG) of a simulated timeline.

One row per resource: the compute resource of each worker, then each
parameter-server link (``ps:K/down`` carries the parameter transfers,
``ps:K/up`` the gradients). Parameter transfers are coloured by their
priority rank (dark = sent first) with a colour bar, or every op by its kind
with a legend. Bars of one row are drawn as one collection
(``broken_barh``), so timelines of thousands of ops render in about a second.
matplotlib is imported lazily with the Agg backend.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dlsched.atomic import atomic_path

KIND_COLOURS = {"compute": "#4C72B0", "recv": "#DD8452", "send": "#55A868"}


def _row_label(worker, resource, multi):
    if resource.startswith("compute"):
        return f"worker {worker} {resource}" if multi else resource
    if resource.endswith("/down"):
        return f"{resource}  (params)"
    if resource.endswith("/up"):
        return f"{resource}  (grads)"
    return resource


def plot_gantt(frame, path: str | Path, *, model: str | None = None, order: str | None = None,
               makespan: float | None = None, efficiency: float | None = None, color_by: str = "priority",
               dpi: int = 120) -> None:
    """Render a timeline DataFrame as a Gantt PNG, written atomically.

    Parameters
    ----------
    frame : pandas.DataFrame
        Columns ``op``, ``kind``, ``resource``, ``start``, ``end`` (seconds),
        optionally ``priority`` and ``worker``.
    path : str or Path
        The PNG to write.
    model, order : str, optional
        Shown in the title with the makespan and efficiency ``E``.
    makespan, efficiency : float, optional
        Makespan defaults to the last end time.
    color_by : {"priority", "kind"}
        ``priority``: transfers coloured by their rank (the enforced priority,
        or the order they were served in when none was enforced); compute ops
        grey-blue, gradient sends green. ``kind``: one colour per op kind.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from dlsched.synthetic import random_dag
    >>> from dlsched.analyses.simulate import simulate
    >>> g, t = random_dag(30, 8, training=True)
    >>> png = pathlib.Path(tempfile.mkdtemp()) / "gantt.png"
    >>> plot_gantt(simulate(g, t).frame(), png, model=g.name, order="random")
    >>> png.stat().st_size > 0
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (integer colour-bar ticks)
    from matplotlib.patches import Patch

    if color_by not in ("priority", "kind"):
        raise ValueError(f"color_by must be 'priority' or 'kind', got {color_by!r}")
    f = frame.copy()
    f["resource"] = f["resource"].astype(str)
    if "worker" not in f.columns:
        f["worker"] = 0
    multi = f["worker"].nunique() > 1
    # Rows: compute per worker, then the shared links.
    rows = []
    for w in sorted(f["worker"].unique()):
        for r in sorted(f.loc[(f["worker"] == w) & f["resource"].str.startswith("compute"), "resource"].unique()):
            rows.append((w, r))
    for r in sorted(f.loc[~f["resource"].str.startswith("compute"), "resource"].unique(),
                    key=lambda r: (int(r.split(":")[1].split("/")[0]) if r.startswith("ps:") else 0, r)):
        rows.append((None, r))
    row_of = {}
    for y, (w, r) in enumerate(rows):
        row_of[(w, r)] = y
    f["row"] = [row_of[(w, r)] if r.startswith("compute") else row_of[(None, r)]
                for w, r in zip(f["worker"], f["resource"])]
    scale = 1e3  # seconds -> ms
    f["s"] = f["start"] * scale
    f["d"] = (f["end"] - f["start"]) * scale
    span = makespan if makespan is not None else float(f["end"].max() if len(f) else 0.0)

    # Transfer ranks for colouring.
    recv = f["kind"] == "recv"
    if "priority" in f.columns and f.loc[recv, "priority"].notna().any():
        rank = f.loc[recv, "priority"].fillna(f.loc[recv, "priority"].max() + 1)
        rank_label = "transfer priority (0 = sent first)"
    else:
        rank = f.loc[recv].groupby("worker")["start"].rank(method="first") - 1
        rank_label = "transfer order as served (0 = first)"
    f["rank"] = np.nan
    f.loc[recv, "rank"] = rank.to_numpy(dtype=float)
    cmap = plt.get_cmap("viridis")
    rmax = max(float(f["rank"].max()) if recv.any() else 0.0, 1.0)

    def colour_of(kind, rk):
        if color_by == "kind" or kind != "recv":
            if color_by == "priority" and kind == "compute":
                return "#8C9DB5"
            return KIND_COLOURS.get(kind, "#999999")
        return cmap(0.9 * rk / rmax)

    height = max(2.6, 0.55 * len(rows) + 1.6)
    fig, ax = plt.subplots(figsize=(13, height))
    few = len(f) <= 80
    for y in range(len(rows)):
        sub = f[f["row"] == y]
        if sub.empty:
            continue
        colours = [colour_of(k, r) for k, r in zip(sub["kind"], sub["rank"])]
        # Sparse rows: white separators between bars. Dense rows: outline each bar in
        # its own colour so sub-pixel bars stay visible.
        dense = len(sub) > 60
        ax.broken_barh(list(zip(sub["s"], sub["d"])), (y - 0.38, 0.76), facecolors=colours,
                       edgecolors=colours if dense else "white", linewidth=0.8 if dense else 0.6)
        if few:
            for s, d, name in zip(sub["s"], sub["d"], sub["op"]):
                if d > span * scale * 0.035:
                    ax.text(s + d / 2, y, str(name), ha="center", va="center", fontsize=7, color="black",
                            clip_on=True, bbox=dict(facecolor="white", alpha=0.5, lw=0, pad=0.5))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_row_label(w, r, multi) for w, r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(span * scale * 1.01, 1e-9))
    ax.axvline(span * scale, color="crimson", lw=1.2, ls="--")
    ax.grid(axis="x", alpha=0.3)
    title = " · ".join(p for p in (
        model,
        f"order: {order}" if order else None,
        f"makespan {span * scale:.3f} ms",
        f"E = {efficiency:.3f}" if efficiency is not None else None,
    ) if p)
    ax.set_title(title, loc="left", fontsize=11)
    if color_by == "kind":
        ax.legend(handles=[Patch(color=c, label=k) for k, c in KIND_COLOURS.items()], loc="lower right",
                  bbox_to_anchor=(1.0, 1.0), fontsize=8, ncol=3, frameon=False)
    else:
        handles = [Patch(color="#8C9DB5", label="compute"), Patch(color=KIND_COLOURS["send"], label="gradient send"),
                   Patch(color="crimson", label="makespan", fill=False, ls="--")]
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncol=3, frameon=False)
        if recv.any():
            sm = plt.cm.ScalarMappable(cmap=matplotlib.colors.ListedColormap(cmap(np.linspace(0, 0.9, 256))),
                                       norm=matplotlib.colors.Normalize(0, rmax))
            cb = fig.colorbar(sm, ax=ax, pad=0.01, fraction=0.04)
            cb.set_label(rank_label, fontsize=8)
            cb.ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)
