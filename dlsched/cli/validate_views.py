"""Tables of ``dlsched validate``: one per order, a verdict line per order on its throughput ratio, then the link
models side by side."""
from __future__ import annotations

from .common import column_table, console, fmt_bytes, fmt_seconds, key_value_table


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{x * 100:+.1f}%"


def _num(x, fmt="{:.3f}") -> str:
    return "-" if x is None or x != x else fmt.format(x)


def _ci(ci, fmt="{:.2f}") -> str:
    """``[1.55, 1.67]``: an interval, when there is one."""
    return f"[{_num(ci[0], fmt)}, {_num(ci[1], fmt)}]" if ci else ""


def _verdict_line(name: str, r: dict, level: float, target: float) -> str:
    """``tac/random: predicted 1.748, measured 1.613, error +0.135 (95% interval +0.07 … +0.20): outside …``."""
    lo, hi = r["ratio_error_ci"]
    verdict = {"within": f"within the ±{target:g} target", "outside": f"outside the ±{target:g} target",
               "undecided": f"undecided: the interval spans the ±{target:g} target; more --iterations narrow it"}
    return (f"{name}/random: predicted {_num(r['predicted_ratio'])}, measured {_num(r['measured_ratio'])}, "
            f"error {_num(r['ratio_error'], '{:+.3f}')} ({level * 100:g}% interval {_num(lo, '{:+.2f}')} … "
            f"{_num(hi, '{:+.2f}')}): {verdict[r['ratio_verdict']]}")


def _check_line(c: dict, target: float) -> str:
    """The calibrated simulator on the job's own calibration iterations, and what it means for the verdicts."""
    line = (f"the simulator on this job's calibration iterations: unordered {_pct(c['unordered']['error'])}, "
            f"TIC {_pct(c['tic']['error'])}; TIC/unordered ratio error {_num(c['ratio_error'], '{:+.3f}')}")
    if not c["beyond_target"]:
        return line
    return (line + f", beyond ±{target:g}: on this machine now the model misses how an enforced order runs, "
            "so read the enforced orders' predicted gains with that error whatever their verdicts say")


def render_ddp(out: dict) -> None:
    """Print ``validate --dp ddp``'s figures: one row per bucket cap, then plan-ddp's pick against the best."""
    n = out["network"]
    console.print(key_value_table(
        f"{out['model']} (training, DDP): {out['workers']} workers, batch {out['batch']}",
        [("hosts", out["hosts"]["note"]), ("CPU", out["cpu"]),
         ("compute per step", f"{fmt_seconds(out['compute_s'])} (the profile's x{out['profile_scale']:.3f}), "
                              f"optimizer {fmt_seconds(out['optimizer_s'])}"),
         ("all-reduce (ring, timed)", f"alpha {fmt_seconds(n['alpha_s'])}, beta "
                                      f"{n['beta_bytes_per_s'] * 8 / 1e6:.0f} Mbit/s"),
         ("beside each other", f"backward x{out['contention']['compute_beside_allreduce']:.3f} slower beside an "
                               f"all-reduce, the all-reduce x{out['contention']['allreduce_beside_compute']:.3f}")]))
    rows = [(c["label"], str(c["buckets"]), fmt_seconds(c["measured_mean"]), fmt_seconds(c["predicted"]),
             _pct(c["error"]), "yes" if c["within_target"] else "NO", _num(c["predicted_efficiency"]))
            for c in out["caps"]]
    console.print(column_table(f"step time per bucket_cap_mb, mean of {out['iterations']} measured steps",
                               ("cap (MiB)", "buckets", "measured", "predicted", "error",
                                f"within ±{out['step_target'] * 100:g}%", "E"), rows))
    rec = out["recommended"]
    console.print(f"plan-ddp recommends bucket_cap_mb={rec['label']} ({rec['bound']}); measured "
                  f"{_pct(rec['measured_loss_vs_best'])} against the best cap, {rec['best_measured']}: "
                  + ("within" if rec["within_target"] else "outside") + f" the {rec['target'] * 100:g}% target")
    o = out.get("ordered")
    if o:
        console.print(column_table(
            f"stock DDP (bucket_cap_mb={o['bucket_cap_mb']}) against the ordered all-reduce ({o['pieces']} pieces), "
            f"{o['blocks']} blocks of {o['block']} steps each; the gain is the median over rounds of DDP's block "
            "over the ordered block beside it",
            ("", "measured", "predicted"),
            [("DDP step", fmt_seconds(o["measured_ddp"]), fmt_seconds(o["predicted_ddp"])),
             ("ordered step", fmt_seconds(o["measured_ordered"]), fmt_seconds(o["predicted_ordered"])),
             ("gain", f"{o['measured_gain']:.3f}x", f"{o['predicted_gain']:.3f}x")], left=("",)))
        console.print(f"ordered all-reduce: gain error {o['gain_error']:+.3f}, "
                      + ("within" if o["within_target"] else "outside") + f" the ±{o['target']:g} target; "
                      f"each piece charged {fmt_seconds(o['piece_cost_s'])} beyond its collective alone (what one of "
                      f"a stream of small all-reduces cost beside backward); parameters equal DDP's to "
                      f"{o['max_param_diff']:.1e}")


def render_fsdp(out: dict) -> None:
    """Print ``validate --dp fsdp``'s figures: FSDP2's default and the plan, step and peak memory."""
    n = out["network"]
    budget = fmt_bytes(out["memory_budget_bytes"]) if out["memory_budget_bytes"] else "none"
    console.print(key_value_table(
        f"{out['model']} (training, FSDP2): {out['workers']} processes, batch {out['batch']}",
        [("hosts", out["hosts"]["note"]), ("CPU", out["cpu"]),
         ("units", ", ".join(out["units"]) or "the root only"), ("memory budget", budget),
         ("compute per step", f"{fmt_seconds(out['compute_s'])}, optimizer {fmt_seconds(out['optimizer_s'])}"),
         ("FSDP2's own work per step", f"{fmt_seconds(out['fsdp_overhead_s'])} (on a one-process group, the "
                                       "ranks meeting where its collectives meet)"),
         ("all-gather (timed)", f"alpha {fmt_seconds(n['all_gather']['alpha_s'])}, beta "
                                f"{n['all_gather']['beta_bytes_per_s'] * 8 / 1e6:.0f} Mbit/s"),
         ("reduce-scatter (timed)", f"alpha {fmt_seconds(n['reduce_scatter']['alpha_s'])}, beta "
                                    f"{n['reduce_scatter']['beta_bytes_per_s'] * 8 / 1e6:.0f} Mbit/s")]))
    rows = []
    for key in ("default", "plan"):
        r = out[key]
        rows.append((key, fmt_seconds(r["measured_mean"]), fmt_seconds(r["predicted"]), _pct(r["error"]),
                     fmt_bytes(r["measured_peak_bytes"]), fmt_bytes(r["predicted_peak_bytes"]),
                     _pct(r["peak_error"]), "yes" if r["within_target"] and r["peak_within_target"] else "NO"))
    console.print(column_table(f"step (mean of {out['iterations']} blocks of {out['block']}) and peak memory per "
                               "process", ("", "measured", "predicted", "error", "peak measured", "peak predicted",
                                           "error", "within 10% / 15%"), rows, left=("",)))
    console.print(f"plan's gain over FSDP2's default: measured {out['measured_gain']:.3f}x, predicted "
                  f"{out['predicted_gain']:.3f}x ({'within' if out['gain_within_target'] else 'NOT within'} "
                  f"±0.05); parameters of the two after the run differ by at most {out['max_param_diff']:.2g}")
    if out["memory_budget_bytes"]:
        console.print(f"the plan's measured peak is {'under' if out['under_budget'] else 'OVER'} the budget")


def render(out: dict) -> None:
    """Print :func:`dlsched.answers.validate.validate`'s figures."""
    if out.get("dp") == "ddp":
        render_ddp(out)
        return
    if out.get("dp") == "fsdp":
        render_fsdp(out)
        return
    o = out["oracle"]
    console.print(key_value_table(
        f"{out['model']} ({out['mode']}): {out['workers']} workers, {out['servers']} server(s), batch {out['batch']}",
        [("hosts", out["hosts"]["note"]), ("CPU", out["cpu"]),
         ("oracle: compute", f"{fmt_seconds(o['compute_per_worker_s'])} per worker; {o['compute']}"),
         ("oracle: compute beside transfers", o["compute_beside_transfers"]),
         *([("oracle: compute crowding", o["compute_crowding"])] if "compute_crowding" in o else []),
         ("oracle: transfers", f"{o['bandwidth_bytes_per_s'] * 8 / 1e6:.0f} Mbit/s, latency "
                               f"{fmt_seconds(o['latency_s'])}; {o['transfers']}"),
         ("bounds U_W / L_W / S", f"{fmt_seconds(out['bounds']['upper'])} / {fmt_seconds(out['bounds']['lower'])}"
                                  f" / {out['bounds']['speedup']:.2f}"),
         ("link model of the tables", out["sharing"])]))
    method = out.get("ratio_interval", {})
    level = method.get("level", 0.95)
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
                *([(f"  {level * 100:g}% interval", _ci(r["measured_ratio_ci"]), _ci(r["predicted_ratio_ci"]),
                    _ci(r["ratio_error_ci"], "{:+.2f}"))] if "ratio_error_ci" in r else []),
                ("straggler share", _num(r["measured_straggler"]), _num(r["predicted_straggler"]), ""),
                ("E (against U_W, L_W)", eff, _num(r["predicted_efficiency"]), ""),
                ("E (trace, realised times)", _num(r["trace_efficiency"]), "", "")]
        console.print(column_table(f"order {name} ({r['iterations']} measured iterations)",
                                   ("", "measured", "predicted", "error"), rows, left=("",)))
    for name, r in out["orders"].items():
        if "ratio_verdict" in r:
            console.print(_verdict_line(name, r, level, method.get("target", 0.05)),
                          soft_wrap=True)  # one line per order, whatever the width
    if "calibration_check" in out:
        console.print(_check_line(out["calibration_check"], method.get("target", 0.05)), soft_wrap=True)
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
