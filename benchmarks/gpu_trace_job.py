"""A real CUDA training job under torchrun, profiled as a user would: DDP or FSDP2 over NCCL, one trace per rank.

``torchrun --nproc-per-node N benchmarks/gpu_trace_job.py MODEL --dp ddp|fsdp --out DIR``. Each rank trains
MODEL (a factory spec) on its GPU for a few steps under ``torch.profiler`` (CPU and CUDA activities, a
``schedule`` with ProfilerStep events) and writes ``DIR/rank<R>.json``: the trace ``dlsched trace`` and
``dlsched profile --from-trace`` read. It is the GPU half of ``benchmarks/gpu_check.sh``; CI never runs it.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlsched.factory import call_factory, training_loss  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--dp", choices=("ddp", "fsdp"), default="ddp")
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--out", required=True)
a = ap.parse_args()

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
gpu = torch.cuda.is_available()  # without one (a dry run here): gloo on the CPU, the same steps
device = torch.device("cuda", local) if gpu else torch.device("cpu")
if gpu:
    torch.cuda.set_device(local)
dist.init_process_group("nccl" if gpu else "gloo", device_id=device if gpu else None)
module, inputs, _ = call_factory(a.model, batch=a.batch)
module = module.train().to(device)
inputs = tuple(x.to(device) for x in inputs)
if a.dp == "ddp":
    model = torch.nn.parallel.DistributedDataParallel(module, device_ids=[local] if gpu else None)
else:
    from torch.distributed.fsdp import fully_shard

    def units(m):  # the root's children with parameters, looking into containers (fully_shard needs a forward)
        for c in m.children():
            if isinstance(c, (torch.nn.ModuleList, torch.nn.ModuleDict)):
                yield from units(c)
            elif any(p.requires_grad for p in c.parameters()):
                yield c
    for unit in list(units(module)):
        fully_shard(unit)
    model = fully_shard(module)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

act = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
Path(a.out).mkdir(parents=True, exist_ok=True)
path = str(Path(a.out) / f"rank{rank}.json")
with torch.profiler.profile(activities=act, schedule=torch.profiler.schedule(wait=1, warmup=2, active=3),
                            on_trace_ready=lambda p: p.export_chrome_trace(path), record_shapes=True) as prof:
    for _ in range(6):
        opt.zero_grad(set_to_none=True)
        training_loss(model(*inputs)).backward()
        opt.step()
        if gpu:
            torch.cuda.synchronize()
        prof.step()
times = []
for _ in range(20):  # the same step without the profiler: what the job takes when nobody watches
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    training_loss(model(*inputs)).backward()
    opt.step()
    if gpu:
        torch.cuda.synchronize()
    times.append(time.perf_counter() - start)
print(f"rank {rank}: {a.dp} step without the profiler, median of 20: {statistics.median(times) * 1e3:.2f} ms "
      f"(min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f})")
dist.destroy_process_group()
