"""Tables of ``dlsched validate``: one per order, then the link models side by side."""
from __future__ import annotations

from .common import column_table, console, fmt_seconds, key_value_table


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{x * 100:+.1f}%"


def _num(x, fmt="{:.3f}") -> str:
    return "-" if x is None or x != x else fmt.format(x)


def render(out: dict) -> None:
    """Print :func:`dlsched.answers.validate.validate`'s figures."""
    o = out["oracle"]
    console.print(key_value_table(
        f"{out['model']} ({out['mode']}): {out['workers']} workers, {out['servers']} server(s), batch {out['batch']}",
        [("hosts", out["hosts"]["note"]), ("CPU", out["cpu"]),
         ("oracle: compute", f"{fmt_seconds(o['compute_per_worker_s'])} per worker; {o['compute']}"),
         ("oracle: compute beside transfers", o["compute_beside_transfers"]),
         ("oracle: transfers", f"{o['bandwidth_bytes_per_s'] * 8 / 1e6:.0f} Mbit/s, latency "
                               f"{fmt_seconds(o['latency_s'])}; {o['transfers']}"),
         ("bounds U_W / L_W / S", f"{fmt_seconds(out['bounds']['upper'])} / {fmt_seconds(out['bounds']['lower'])}"
                                  f" / {out['bounds']['speedup']:.2f}"),
         ("link model of the tables", out["sharing"])]))
    for name, r in out["orders"].items():
        eff = _num(r["measured_efficiency"])
        if r["measured_outside_bounds"]:
            eff += f" ({r['measured_outside_bounds']} outside [L_W, U_W], up to {fmt_seconds(r['measured_model_error'])})"
        rows = [("iteration time, mean", fmt_seconds(r["measured_mean"]), fmt_seconds(r["predicted_mean"]),
                 _pct(r["mean_error"])),
                ("iteration time, p95", fmt_seconds(r["measured_p95"]), fmt_seconds(r["predicted_p95"]),
                 _pct(r["p95_error"])),
                ("throughput / random", _num(r.get("measured_ratio")), _num(r.get("predicted_ratio")),
                 _num(r.get("ratio_error"), "{:+.3f}")),
                ("straggler share", _num(r["measured_straggler"]), _num(r["predicted_straggler"]), ""),
                ("E (against U_W, L_W)", eff, _num(r["predicted_efficiency"]), ""),
                ("E (trace, realised times)", _num(r["trace_efficiency"]), "", "")]
        console.print(column_table(f"order {name} ({r['iterations']} measured iterations)",
                                   ("", "measured", "predicted", "error"), rows, left=("",)))
    rows = [(s, _pct(m["max_abs_mean_error"]), _pct(m["mean_abs_mean_error"]), _num(m["max_abs_ratio_error"]))
            for s, m in out["link_models"].items()]
    console.print(column_table("link models (prediction error over the orders)",
                               ("model", "worst |mean error|", "average |mean error|", "worst |ratio error|"),
                               rows, left=("model",)))
    fit = out["replay_fit"]
    console.print(f"replayed orders (TicTac Fig. 12a): normalised step time = {_num(fit['slope'])}·E + "
                  f"{_num(fit['intercept'])}, R² = {_num(fit['r2'])} over {fit['points']} iterations")
    for key in ("traces", "plot"):
        if key in out:
            console.print(f"wrote {out[key] if key == 'plot' else ', '.join(out[key].values())}")
