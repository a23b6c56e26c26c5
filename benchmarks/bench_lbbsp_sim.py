"""Online batch sizing (LB-BSP, paper 002) in the simulator: Algorithm 2 on Fig. 8, Algorithm 1 on Table 3 (issue 13).

1. **Algorithm 2 on the paper's Fig. 8 cluster** (acceptance 3): four GPU
   workers with affine curves ``t_i(b) = a_i + s_i·b``, ``a = (0.82, 0.97,
   1.00, 1.14)`` s, ``s = (0.5/57, 0.03, 0.05, 2/26)`` s/sample (they encode
   "K520 32→6 saves about 2 s" and "V100 32→89 costs 0.5 s"), X = 128, from
   (32, 32, 32, 32). Noise-free: the split, the fine-tune entry and the
   iteration time against the optimum 1.602 s; worker 1 slower by 0.3 s from
   iteration 150 (new optimum (96, 13, 13, 6)). With 2% lognormal noise on
   every time (no slowdown), over seeds. The paper's listing as written
   (``settle=False``) is shown beside.
2. **Algorithm 1 and the predictors in the form of Table 3** (acceptance 4).
   The trace (:func:`dlsched.planning.online_batch_sim.table3_trace`): 32 CPU
   workers of four kinds (20, 30, 40, 60 samples/s at a full core, 8 each); the
   CPU share each may use moves between {1, 0.75, 0.5, 0.25} as a Markov chain
   (leaves its state with probability 1/80 per iteration, to one of the other
   three at random) and the speed is proportional to it; memory used sits at a
   per-worker level in [0.3, 0.6] (±0.02 jitter) except in memory-pressure
   episodes (start probability 1/300 per iteration, mean 40 iterations, level
   0.9–0.98) that divide the speed by ``1 + 8·(m − 0.85)``; transient spikes
   multiply a worker's time by U(1.5, 3) for one iteration with probability 5%
   and show in no reading; every time has 3% lognormal noise; 2,000
   iterations; X = 2,048. The readings the policy sees are the CPU share and
   memory in force for the coming iteration. Per predictor (memoryless, EMA
   α = 0.2, NARX: one hidden layer of 16, look-back 2, shared by all workers,
   EMA until 500 training samples): the RMSE of the predicted speed and the
   mean iteration time normalised by BSP's, over seeds (median, min–max).
   Beside it, NARX shared across workers against one NARX per worker over a
   short history (300 iterations).

The trace is not tuned towards the targets: a target the faithful
implementation misses is reported FAIL with its reason. Writes
``benchmarks/results/lbbsp_sim.{md,json}``.

Run: ``python benchmarks/bench_lbbsp_sim.py [--seeds N]``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dlsched.machine import cpu_model, load_averages  # noqa: E402

from dlsched.planning.online_batch_sim import fig8_trace, simulate_policies, table3_trace  # noqa: E402

OPT, OPT_SLOW = 1.602, (96, 13, 13, 6)
PREDICTORS = ("memoryless", "ema", "narx")


def stat(values) -> dict:
    values = [float(v) for v in values]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def fmt(s: dict, f: str = ".3f") -> str:
    return f"{s['median']:{f}} ({s['min']:{f}}–{s['max']:{f}})"


def batches(res, policy):
    st = res.steps[res.steps.policy == policy]
    return st.pivot(index="iteration", columns="worker", values="batch").to_numpy()


def fig8() -> dict:
    """Noise-free run with the slowdown, and the paper's listing beside it."""
    out = {}
    for label, opts in (("settle", {}), ("paper listing", {"settle": False})):
        res = simulate_policies(fig8_trace(400), ["lbbsp-gpu"], 128, options={"lbbsp-gpu": opts})
        b, it = batches(res, "lbbsp-gpu"), res.iterations.iteration_time.to_numpy()
        at = [k for k in range(150) if tuple(b[k]) == (89, 21, 12, 6) and (b[k:150] == b[k]).all()]
        slow = [k for k in range(150, 400) if np.abs(b[k:] - OPT_SLOW).max() <= 1]
        out[label] = {"start_time": float(it[0]), "fine_tune_at": res.phases.get("lbbsp-gpu"),
                      "exact_split_from": at[0] if at else None, "time_100_149_max": float(it[100:150].max()),
                      "final_split": b[-1].tolist(), "slowdown_within_1_from": slow[0] if slow else None}
    faster = fig8_trace(400, slow_by=-0.3)
    res = simulate_policies(faster, ["lbbsp-gpu"], 128)
    b, target = batches(res, "lbbsp-gpu"), faster.optimum(399, 128)[0]
    within = [k for k in range(150, 400) if np.abs(b[k:] - target).max() <= 1]
    out["faster"] = {"optimum": target, "final_split": b[-1].tolist(), "within_1_from": within[0] if within else None}
    return out


def fig8_noise(seeds) -> dict:
    gaps, finals = [], []
    for seed in seeds:
        res = simulate_policies(fig8_trace(400, noise=0.02, slow_at=None, seed=seed), ["lbbsp-gpu"], 128)
        gaps.append(res.iterations.iteration_time.iloc[100:].mean() / OPT - 1)
        finals.append(batches(res, "lbbsp-gpu")[-1].tolist())
    return {"gap_100_399": stat(gaps), "final_splits": finals}


def table3(seeds, iterations=2000) -> dict:
    per = {p: {"rmse": [], "normalised": []} for p in PREDICTORS}
    ratio = []
    for seed in seeds:
        res = simulate_policies(table3_trace(32, iterations, seed=seed),
                                ["bsp"] + [f"lbbsp-cpu:{p}" for p in PREDICTORS], 2048, seed=seed)
        s = res.summary().set_index("policy")
        for p in PREDICTORS:
            per[p]["rmse"].append(s.loc[f"lbbsp-cpu:{p}", "rmse"])
            per[p]["normalised"].append(s.loc[f"lbbsp-cpu:{p}", "vs_bsp"])
        ratio.append(per["narx"]["rmse"][-1] / per["ema"]["rmse"][-1])
    return {"per_seed": per, "rmse_ratio_narx_ema": ratio,
            "summary": {p: {k: stat(v) for k, v in d.items()} for p, d in per.items()}}


def shared_vs_per_worker(seeds, iterations=300) -> dict:
    out = {"shared": [], "per-worker": []}
    for seed in seeds:
        trace = table3_trace(32, iterations, seed=seed)
        for label, shared in (("shared", True), ("per-worker", False)):
            res = simulate_policies(trace, ["lbbsp-cpu:narx"], 2048, seed=seed,
                                    options={"lbbsp-cpu:narx": {"shared": shared}})
            out[label].append(float(res.rmse().iloc[0]))
    return {k: stat(v) for k, v in out.items()}


def checks(f8, noise, t3) -> list[dict]:
    s, p = f8["settle"], f8["paper listing"]
    med = {k: {m: t3["summary"][k][m]["median"] for m in ("rmse", "normalised")} for k in PREDICTORS}
    ratio = stat(t3["rmse_ratio_narx_ema"])
    rows = [
        ("3 start iteration time", f"{s['start_time']:.3f} s", "3.60 s", abs(s["start_time"] - 3.60) < 0.01, ""),
        ("3 fine-tune entered (once, by construction)", f"iteration {s['fine_tune_at']}", "≤ 40 (paper ≈ 30)",
         s["fine_tune_at"] is not None and s["fine_tune_at"] <= 40, ""),
        ("3 exact (89, 21, 12, 6) held from", f"iteration {s['exact_split_from']}", "≤ 200",
         s["exact_split_from"] is not None and s["exact_split_from"] <= 200, ""),
        ("3 iteration time, iterations 100–149 (max)", f"{s['time_100_149_max']:.4f} s", "≤ 1.602 s + 1%",
         s["time_100_149_max"] <= OPT * 1.01, ""),
        ("3 after +0.3 s on worker 1: within ±1 of (96, 13, 13, 6) from", f"iteration {s['slowdown_within_1_from']}"
         f", final {s['final_split']}", "≤ 400", s["slowdown_within_1_from"] is not None, ""),
        ("(beyond the issue) worker 1 faster by 0.3 s at 150: within ±1 of the new optimum "
         f"{tuple(f8['faster']['optimum'])} from", f"iteration {f8['faster']['within_1_from']}, final "
         f"{f8['faster']['final_split']}", "≤ 400", f8["faster"]["within_1_from"] is not None, ""),
        ("3 2% noise: mean iteration time 100–399 over 1.602 s − 1", fmt(noise["gap_100_399"], "+.2%"), "≤ 3%",
         noise["gap_100_399"]["max"] <= 0.03, ""),
        ("4 RMSE NARX / EMA (per seed)", fmt(ratio), "≤ 0.8 (paper 0.61)", ratio["max"] <= 0.8,
         "NARX's edge over EMA comes from the CPU reading at a Markov switch and the spikes it ignores; "
         "on some seeds it is smaller than 20%"),
        ("4 RMSE NARX ≤ memoryless", f"{med['narx']['rmse']:.2f} vs {med['memoryless']['rmse']:.2f}", "≤",
         all(a <= b for a, b in zip(t3["per_seed"]["narx"]["rmse"], t3["per_seed"]["memoryless"]["rmse"])), ""),
        ("4 normalised time NARX ≤ EMA", f"{med['narx']['normalised']:.3f} vs {med['ema']['normalised']:.3f}", "≤",
         all(a <= b for a, b in zip(t3["per_seed"]["narx"]["normalised"], t3["per_seed"]["ema"]["normalised"])), ""),
        ("4 normalised time NARX ≤ memoryless",
         f"{med['narx']['normalised']:.3f} vs {med['memoryless']['normalised']:.3f}", "≤",
         all(a <= b for a, b in zip(t3["per_seed"]["narx"]["normalised"],
                                    t3["per_seed"]["memoryless"]["normalised"])), ""),
        ("4 normalised time, all predictors", ", ".join(f"{k} {med[k]['normalised']:.3f}" for k in PREDICTORS),
         "≤ 0.6", all(max(t3["per_seed"][k]["normalised"]) <= 0.6 for k in PREDICTORS), ""),
        ("(paper listing, not gated) iteration time 100–149 (max)", f"{p['time_100_149_max']:.4f} s",
         "shown", True, "settle=False keeps stepping between the optimum and a neighbour"),
    ]
    return [{"check": c, "measured": m, "target": t, "pass": bool(ok), "why": w} for c, m, t, ok, w in rows]


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "lbbsp_sim.json").write_text(json.dumps(results, indent=1, default=float))
    t3 = results["table3"]["summary"]
    lines = ["# Online batch sizing in the simulator (issue 13, acceptance 3 and 4)", "",
             f"CPU: {results['cpu']}; load {results['load']}; seeds {results['seeds']}; Table 3 run (32 workers × "
             f"2,000 iterations, 4 policies) wall time {fmt(results['wall_s'], '.2f')} s over "
             f"{results['wall_s']['n']} repeats.", "",
             "Table 3 trace: " + results["table3_trace"], "",
             "| check | measured, median (min–max) | target | result |", "|---|---|---|---|"]
    for r in results["checks"]:
        lines.append(f"| {r['check']} | {r['measured']} | {r['target']} | "
                     f"{'PASS' if r['pass'] else 'FAIL: ' + r['why']} |")
    lines += ["", "## Table 3 form (median over seeds, min–max)", "",
              "| predictor | RMSE (samples/s) | iteration time / BSP | paper RMSE | paper time |",
              "|---|---|---|---|---|"]
    paper = {"memoryless": (11.85, 0.58), "ema": (7.85, 0.48), "narx": (4.78, 0.42)}
    for k in PREDICTORS:
        lines.append(f"| {k} | {fmt(t3[k]['rmse'], '.2f')} | {fmt(t3[k]['normalised'])} | {paper[k][0]} | "
                     f"{paper[k][1]} |")
    sh = results["shared_vs_per_worker"]
    lines += ["", f"NARX over a short history (300 iterations): RMSE shared across workers "
              f"{fmt(sh['shared'], '.2f')}, one model per worker {fmt(sh['per-worker'], '.2f')} samples/s.", "",
              "## Fig. 8 (noise-free)", "", "| variant | start s | fine-tune at | exact split from | "
              "max time 100–149 s | final split (after slowdown) | within ±1 from |",
              "|---|---|---|---|---|---|---|"]
    for k, v in results["fig8"].items():
        if k == "faster":
            continue
        lines.append(f"| {k} | {v['start_time']:.3f} | {v['fine_tune_at']} | {v['exact_split_from']} | "
                     f"{v['time_100_149_max']:.4f} | {v['final_split']} | {v['slowdown_within_1_from']} |")
    (out / "lbbsp_sim.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    seeds = list(range(args.seeds))
    f8, noise = fig8(), fig8_noise(seeds)
    t3 = table3(seeds)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        simulate_policies(table3_trace(32, 2000, seed=0), ["bsp"] + [f"lbbsp-cpu:{p}" for p in PREDICTORS], 2048)
        walls.append(time.perf_counter() - t0)
    results = {"cpu": cpu_model(), "load": load_averages(), "seeds": len(seeds),
               "fig8": f8, "fig8_noise": noise, "table3": t3, "shared_vs_per_worker": shared_vs_per_worker(seeds),
               "table3_trace": table3_trace(32, 2, seed=0).description, "wall_s": stat(walls)}
    results["checks"] = checks(f8, noise, t3)
    write(results, Path(__file__).resolve().parent / "results")
    for r in results["checks"]:
        print(f"{'PASS' if r['pass'] else 'FAIL'}: {r['check']}: {r['measured']} (target {r['target']})"
              + (f" — {r['why']}" if not r["pass"] else ""))
    print((Path(__file__).resolve().parent / "results" / "lbbsp_sim.md").read_text())
    return 0 if all(r["pass"] for r in results["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
