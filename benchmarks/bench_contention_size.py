"""How much backward slows beside one large all-reduce, and beside a stream of small ones (issue 29).

``validate --dp ddp`` fits the compute slow-down beside communication on one
whole-gradient all-reduce beside backward (``analyses/calibration.fit_contention``),
and the simulator applies it to every collective alike. The ordered
all-reduce's pieces and DDP's small buckets are many small collectives; this
bench measures whether they slow backward more than one large one with the
link as busy.

Two ranks in network namespaces, rank 0's link shaped to ``RATE`` (as
``validate``), one intra-op thread each, the example transformer (batch 24,
training). Each round runs three backwards after a barrier, in a rotating
order: alone; beside one all-reduce of the whole gradient's bytes; beside a
stream of ``PIECE`` all-reduces issued one after another until backward
ends. Both beside modes run on a gloo group of their own, started when
backward starts, and keep the link busy for all of backward. The report gives
the median backward of each mode over rounds and ranks, each mode's slow-down
over the quiet one, and one small all-reduce's time alone and in the stream;
medians of ``REPEATS`` jobs.

Measured (2026-11-27, Intel Xeon): ×1.22 beside the large one and ×1.21 beside
13 small ones, so the collectives' number does not change what they cost
backward. What the ordered all-reduce's step lost beyond it was the slowest
rank's slow-down and each small collective's wait for its threads, which
``validate --dp ddp`` now measures (``docs/validate-ddp.md``).

Needs root; one run under ``flock /tmp/dlsched-heavy.lock``. Writes
``benchmarks/results/contention_size.md``/``.json``. The rank entry point:
``python -m benchmarks.bench_contention_size --config ...``.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
OUT = HERE / "results"
MODEL = f"{REPO / 'examples' / 'torch_models.py'}:transformer"
BATCH, RATE, ROUNDS, WARMUP, PIECE, REPEATS = 24, "600mbit", 12, 2, 1 << 20, 5
MODES = ("quiet", "one", "stream")

from dlsched.jobs.ddp_caps_run import Stream, _Beside  # noqa: E402 - the checkout on the path first


def _alone(link, calls: int) -> list:
    """Seconds of ``calls`` of the stream's all-reduces with nothing beside them."""
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        link.dist.all_reduce(link.buf, group=link.group)
        out.append(time.perf_counter() - t0)
    return out


def run_rank(config: dict, rank: int, init_method: str) -> dict:
    import torch
    import torch.distributed as dist

    from dlsched.factory import training_loss
    from dlsched.jobs.ddp_caps_run import join_with_model
    from dlsched.jobs.interleave import rotation
    from dlsched.runtime.gloo_release import let_go
    module, inputs = join_with_model(config)
    nbytes = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    links = {"one": _Beside(dist, torch, nbytes, config["timeout"]),
             "stream": Stream(dist, torch, config["piece"], config["timeout"])}
    out = {m: [] for m in MODES}
    counts = []
    dist.barrier()
    alone = _alone(links["stream"], 10)
    for r in range(config["warmup"] + config["rounds"]):
        for mode in rotation(list(MODES), r):
            dist.barrier()
            loss = training_loss(module(*inputs))
            link = links.get(mode)
            if link is not None:
                link.start()
            t0 = time.perf_counter()
            loss.backward()
            t1 = time.perf_counter()
            if link is not None:
                link.join()
            module.zero_grad(set_to_none=True)
            if r >= config["warmup"]:
                out[mode].append(t1 - t0)
                if mode == "stream":
                    counts.append(links["stream"].count)
    dist.barrier()
    let_go([link.buf for link in links.values()], config["timeout"])
    return {"rank": rank, "backward": out, "stream_counts": counts, "bytes": nbytes, "alone": alone,
            "beside": links["stream"].times}


def _one_job(config: dict) -> list:
    from dlsched.runtime import launcher
    from dlsched.runtime.hosts import open_hosts
    hosts = open_hosts("netns", 2, RATE)
    try:
        job = launcher.launch_ranks("benchmarks.bench_contention_size", config, 2, job_timeout=900.0, grace=30.0,
                                    prefix="dlsched-contention-", **hosts.launch_args())
    finally:
        hosts.close()
    return sorted(job.results, key=lambda x: x["rank"])


def main() -> None:
    import platform

    from dlsched.atomic import atomic_write_text
    from dlsched.runtime import netns
    if not netns.available():
        print("SKIP: needs root for network namespaces")
        return
    config = {"model": MODEL, "batch": BATCH, "threads": 1, "timeout": 300.0, "rounds": ROUNDS, "warmup": WARMUP,
              "piece": PIECE}
    runs = []
    for i in range(REPEATS):
        res = _one_job(config)
        med = {m: statistics.median([t for x in res for t in x["backward"][m]]) for m in MODES}
        runs.append({"backward_s": med, "slowdown": {m: med[m] / med["quiet"] for m in MODES},
                     "stream_collectives": statistics.median([c for x in res for c in x["stream_counts"]]),
                     "piece_alone_s": statistics.median([t for x in res for t in x["alone"][1:]]),
                     "piece_beside_s": statistics.median([t for x in res for t in x["beside"]]),
                     "gradient_bytes": res[0]["bytes"]})
        print(f"repeat {i + 1}/{REPEATS}: " + ", ".join(f"{m} x{runs[-1]['slowdown'][m]:.3f}" for m in MODES),
              flush=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor())

    def spread(key, sub=None):
        vals = [r[key][sub] if sub else r[key] for r in runs]
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    summary = {"model": "transformer", "batch": BATCH, "rate": RATE, "rounds": ROUNDS, "repeats": REPEATS,
               "piece_bytes": PIECE, "gradient_bytes": runs[0]["gradient_bytes"], "cpu": cpu,
               "backward_s": {m: spread("backward_s", m) for m in MODES},
               "slowdown": {m: spread("slowdown", m) for m in MODES},
               "stream_collectives": spread("stream_collectives"), "piece_alone_s": spread("piece_alone_s"),
               "piece_beside_s": spread("piece_beside_s"), "runs": runs}
    OUT.mkdir(exist_ok=True)
    atomic_write_text(OUT / "contention_size.json", json.dumps(summary, indent=1) + "\n")
    f = lambda d, k=1.0, fmt=".3f": f"{d['median'] * k:{fmt}} ({d['min'] * k:{fmt}}…{d['max'] * k:{fmt}})"
    what = {"quiet": "nothing",
            "one": f"one all-reduce of the whole gradient ({runs[0]['gradient_bytes'] / 2**20:.1f} MiB)",
            "stream": f"{PIECE / 2**20:g} MiB all-reduces one after another "
                      f"({f(summary['stream_collectives'], fmt='.1f')} during backward)"}
    lines = ["# Backward beside one large all-reduce and beside a stream of small ones", "",
             f"`benchmarks/bench_contention_size.py`: the transformer (batch {BATCH}), 2 ranks of one thread, "
             f"rank 0's link shaped to {RATE}, {ROUNDS} rounds after {WARMUP} per job, each job's median over "
             f"rounds and ranks; median of {REPEATS} jobs (min…max); {cpu}.", "",
             "| beside backward | backward (s) | slow-down |", "|---|---|---|"]
    for m in MODES:
        lines.append(f"| {what[m]} | {f(summary['backward_s'][m], fmt='.4f')} | x{f(summary['slowdown'][m])} |")
    lines += ["", f"One {PIECE / 2**20:g} MiB all-reduce: {f(summary['piece_alone_s'], 1e3, '.1f')} ms alone, "
              f"{f(summary['piece_beside_s'], 1e3, '.1f')} ms in the stream beside backward."]
    atomic_write_text(OUT / "contention_size.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if "--config" in sys.argv:
        from dlsched.runtime.launcher import rank_main
        rank_main(sys.argv[1:], "one rank of the contention-by-size bench", run_rank)
    else:
        main()
