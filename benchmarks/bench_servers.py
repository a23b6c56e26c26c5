"""Parameter servers swept around Lemma 3.2's answer (paper 003 §3.3): a table, not a gate.

Lemma 3.2 counts the servers that hide ``N_w`` workers' pulls and pushes of
``S_p`` bytes behind one round of computation ``T_C``, assuming every server
carries ``S_p / N_ps``. This sweeps the simulated iteration time of ResNet-50
(training, batch 8; the demo's model) with 8 workers over 1..8 servers, under
round-robin placement (TensorFlow's replica_device_setter, dlsched's default)
and greedy placement, and prints where the lemma's answer falls. The oracle is
the analytic roofline (``profile --analytic``, device spec ``cpu``, 10 Gbit/s
links), so the table is the same on every machine.

Run: ``python benchmarks/bench_servers.py [--workers 8] [--iterations 3]``;
writes ``benchmarks/results/servers.md``.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "examples/torch_models.py:resnet50"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--max-servers", type=int, default=8)
    args = ap.parse_args()

    from dlsched.analyses.multiworker import simulate_workers
    from dlsched.analyses.orders import compute_order
    from dlsched.profiling.oracle_times import load_times
    from dlsched.importers.loader import load_model
    from dlsched.answers.options import ModelSpec, OracleSpec
    from dlsched.answers.plan_cluster import Servers, plan_cluster
    from dlsched.planning.server_balance import server_balance

    dlsched = str(Path(sys.executable).with_name("dlsched"))
    with tempfile.TemporaryDirectory() as tmp:
        dag, oracle = f"{tmp}/resnet50.dag.json", f"{tmp}/oracle.csv"
        subprocess.run([dlsched, "inspect", MODEL, "--mode", "training", "--batch", "8", "--save", dag],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        subprocess.run([dlsched, "profile", dag, "--analytic", "-o", oracle], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        graph = load_model(dag)
        times = load_times(oracle, graph)
    bandwidth = 10e9 / 8  # the cpu device spec's links
    lemma = plan_cluster(ModelSpec.of(graph), OracleSpec.of(times), servers=Servers(workers=args.workers,
                                                                                     bandwidth=bandwidth))
    answer = lemma.parameter_servers
    rows = []
    for servers in range(1, args.max_servers + 1):
        row = {"servers": servers}
        for strategy in ("round-robin", "greedy"):
            graph.assign_ps(servers, strategy)
            order = compute_order(graph, "tac", times)
            r = simulate_workers(graph, times, workers=args.workers, priorities=order,
                                 iterations=args.iterations, keep_timeline=False)
            row[strategy] = r.summary()["iteration_time"]["mean"]
            row[f"{strategy} max/mean"] = server_balance(graph).imbalance
        rows.append(row)

    lines = [f"ResNet-50 training, batch 8, {args.workers} workers, TAC, serial links of 10 Gbit/s, analytic "
             f"oracle (T_C = {lemma.inputs.compute_time:.3f} s, S_p = {lemma.inputs.param_bytes / 1e6:.1f} MB). "
             f"Lemma 3.2: {answer} server(s).", "",
             "| servers | round-robin iteration | max/mean load | greedy iteration | max/mean load |",
             "|---:|---:|---:|---:|---:|"]
    for r in rows:
        mark = " ← Lemma 3.2" if r["servers"] == answer else ""
        lines.append(f"| {r['servers']}{mark} | {r['round-robin']:.3f} s | {r['round-robin max/mean']:.2f} | "
                     f"{r['greedy']:.3f} s | {r['greedy max/mean']:.2f} |")
    text = "\n".join(lines)
    print(text)
    out = ROOT / "benchmarks" / "results" / "servers.md"
    out.write_text(text + "\n")
    print(f"\nwritten to {out.relative_to(ROOT)} (a table, not a gate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
