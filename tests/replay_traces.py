"""Real CPU training traces for the replay tests, made once and cached under the tests' cache dir.

``python -m tests.replay_traces OUT_DIR [ddp]`` writes them: one process training a small CNN under
``torch.profiler`` with ``prof.step()``, and a 2-rank gloo DDP job (``torch.multiprocessing.spawn``),
one trace per rank.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

STEPS = 6


def _model():
    import torch.nn as nn

    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 10))


def _train(model, out: Path, rank: int | None = None) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    sched = schedule(wait=1, warmup=1, active=STEPS - 2)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, record_shapes=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(STEPS):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            prof.step()


def one_process(out: Path) -> None:
    import torch

    torch.set_num_threads(1)
    _train(_model(), out)


def _ddp_rank(rank: int, world: int, out_dir: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = torch.nn.parallel.DistributedDataParallel(_model())
        _train(model, Path(out_dir) / f"ddp_rank{rank}.json", rank)
    finally:
        dist.destroy_process_group()


def ddp(out_dir: Path, world: int = 2) -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_rank, args=(world, str(out_dir), port), nprocs=world, join=True)


if __name__ == "__main__":
    d = Path(sys.argv[1])
    d.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if len(sys.argv) > 2 and sys.argv[2] == "ddp":
        ddp(d)
    else:
        one_process(d / "train_1proc.json")
