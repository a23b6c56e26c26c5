"""Tables of ``dlsched trace``: per rank and step, collectives and buckets, stragglers, HTA's figures."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import column_table, console, fmt_seconds

#: Steps listed per rank before the table is cut (all are in --json).
MAX_ROWS = 24


def _us(x) -> str:
    return fmt_seconds(float(x) * 1e-6)


def print_report(report) -> None:
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}")
    folders = {str(Path(p).parent) for p in report.files.values()}
    where = f" in {folders.pop()}" if len(folders) == 1 else ""
    console.print(f"{len(report.files)} rank(s){where}: " + ", ".join(
        f"{r}: {Path(p).name if where else p}" for r, p in report.files.items()), soft_wrap=True)
    _per_step(report)
    _collectives(report)
    _fsdp(report.fsdp, report.fsdp_units)
    if report.ranks is not None and len(report.files) > 1:
        _stragglers(report.ranks)
    _hta(report.hta)


def _ms(x_us) -> str:
    v = float(x_us) / 1e3
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _same_step(col: pd.Series, step) -> pd.Series:
    """Rows of ``step``; a trace without steps has one row, step None, for the whole trace."""
    return col.isna() if pd.isna(step) else col == step


def _narrow(title: str, columns: tuple[str, ...], rows):
    """A borderless table: ten columns of figures fit a terminal of 80."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=None, padding=(0, 1), header_style="bold")
    for col in columns:
        t.add_column(col, justify="right", no_wrap=True)
    for row in rows:
        t.add_row(*row)
    return t


def _per_step(report) -> None:
    b = report.breakdown
    rated = report.bounds
    replay = report.replay
    rows = []
    for r in b.head(MAX_ROWS).itertuples(index=False):
        e = rep = ""
        if not rated.empty:
            hit = rated[(rated["rank"] == r.rank) & _same_step(rated["step"], r.step)]
            if len(hit):
                eff, err = hit["efficiency"].iloc[0], hit["model_error"].iloc[0]
                e = f"{eff:.2f}" if eff is not None and not pd.isna(eff) else \
                    "!" + ("+" if err > 0 else "−") + _ms(abs(err) * 1e6)
        if replay is not None and not replay.empty:
            hit = replay[(replay["rank"] == r.rank) & _same_step(replay["step"], r.step)]
            if len(hit):
                rep = f"{hit['error'].iloc[0]:+.1%}"
        rows.append((str(r.rank), "all" if pd.isna(r.step) else str(int(r.step)), _ms(r.end - r.ts), _ms(r.compute), _ms(r.communication),
                     _ms(r.exposed_communication), _ms(r.overlap), _ms(r.idle), e, rep))
    modes = ", ".join(sorted(set(b["mode"])))
    console.print(_narrow(f"per rank and step, ms ({modes} time)",
                          ("rank", "step", "time", "compute", "comm", "exposed", "overlap", "idle", "E", "replay"),
                          rows))
    if len(b) > MAX_ROWS:
        console.print(f"… {len(b) - MAX_ROWS} more rows in --json")
    console.print("exposed: communication not hidden behind compute. E: TicTac's efficiency of the step's compute "
                  "and collective streams; !+145 where the step lies 145 ms outside [L, U] (a model error, no E). "
                  "replay: the step rebuilt from its events and simulated, against its measured time.")


def _collectives(report) -> None:
    c = report.collectives
    if c.empty:
        console.print("collectives: none found")
        return
    c = c[c["step"] >= 0]  # kernels queued before the trace began have no step
    per_step = c.groupby(["rank", "name", "step"]).agg(n=("name", "size"), elements=("elements", "sum"))
    g = per_step.groupby(["rank", "name"]).agg(steps=("n", "size"), n_lo=("n", "min"), n_hi=("n", "max"),
                                               e_lo=("elements", "min"), e_hi=("elements", "max"))

    def span(lo, hi, fmt="{:,}"):
        return fmt.format(int(lo)) if lo == hi else f"{fmt.format(int(lo))}–{fmt.format(int(hi))}"

    rows = [(str(r), name, str(int(x.steps)), span(x.n_lo, x.n_hi), span(x.e_lo, x.e_hi))
            for (r, name), x in g.head(MAX_ROWS).iterrows()]
    console.print(column_table("collectives per step", ("rank", "collective", "steps", "count per step",
                                                        "elements per step"), rows, left=("collective",)))
    bk = report.buckets
    if not bk.empty:
        first = bk[bk["rank"] == bk["rank"].min()]
        for step, grp in first.groupby("step"):
            sizes = ", ".join(f"{int(x):,}" for x in grp["elements"])
            console.print(f"DDP buckets, rank {int(grp['rank'].iloc[0])} step {step}: {sizes} elements "
                          f"({grp['dtype'].iloc[0]})")
            break


def _fsdp(found, u) -> None:
    """An FSDP2 job's units (the first rank's), and the order of its first step's collectives."""
    if u is None or u.empty:
        return
    rank = u["rank"].iloc[0]
    mine = found[found["rank"] == rank]
    rows = [(x.unit, f"{x.elements:,}", f"{x.forward:g}", f"{x.backward:g}", f"{x.prefetched:g}",
             _ms(x.all_gather_us), _ms(x.reduce_scatter_us)) for x in u.itertuples()]
    console.print(column_table(f"FSDP2 units, rank {rank}, per step (AG all-gather, RS reduce-scatter)",
                               ("unit", "elements", "AG fwd", "AG bwd", "prefetched", "AG ms", "RS ms"), rows,
                               left=("unit",)))
    first = mine[mine["step"] == mine["step"].min()]
    for kind, label in (("all_gather", "all-gathers"), ("reduce_scatter", "reduce-scatters")):
        k = first[first["kind"] == kind]
        order = [f"{x.unit}{'*' if x.prefetched else ''}" + (" |" if x.phase == "forward" and nxt == "backward"
                 else "") for x, nxt in zip(k.itertuples(), list(k["phase"].iloc[1:]) + [None])]
        console.print(f"{label} of step {first['step'].iloc[0]} in launch order: {' '.join(order)}", soft_wrap=True)
    console.print("(* prefetched; | forward ends)")


def _stragglers(ranks) -> None:
    s = ranks.stragglers
    rows = [(str(r.step), _us(r.step_time), str(r.straggler), f"{r.share:.1%}", str(r.most_last))
            for r in s.head(MAX_ROWS).itertuples(index=False)]
    console.print(column_table(f"across ranks (clock: {ranks.clock})",
                               ("step", "step time", "straggler", "straggler share", "last to arrive most"), rows))
    m = ranks.matches
    if len(m):
        worst = m.loc[m["skew"].idxmax()]
        console.print(f"largest skew: {_us(worst['skew'])} at step {worst['step']} {worst['name']} "
                      f"#{worst['seq']}, rank {worst['last_rank']} last")


def _hta(h: pd.DataFrame) -> None:
    if h.empty:
        return
    rows = [(str(int(r["rank"])), f"{r['compute_time_pctg']:.1f}%", f"{r['non_compute_time_pctg']:.1f}%",
             f"{r['idle_time_pctg']:.1f}%",
             "—" if r["comp_comm_overlap_pctg"] is None or pd.isna(r["comp_comm_overlap_pctg"])
             else f"{r['comp_comm_overlap_pctg']:.1f}%") for _, r in h.iterrows()]
    console.print(column_table("whole trace, Holistic Trace Analysis's definitions",
                               ("rank", "compute", "non-compute", "idle", "comp/comm overlap"), rows))
