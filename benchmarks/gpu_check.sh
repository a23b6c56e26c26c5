#!/usr/bin/env bash
# dlsched's CUDA paths on a real GPU, in one run: the GPU profiler, a real CUDA trace of DDP and of FSDP2 over
# NCCL (torchrun), that trace imported as an oracle and rated by `dlsched trace`, and the tests marked gpu.
# Usage: OUT=DIR bash benchmarks/gpu_check.sh [MODEL] — CI has no GPU and never runs it; results/gpu_check.md
# holds what it printed on the GPU it last ran on. Without a GPU the jobs fall back to gloo on the CPU.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TORCH_CPP_LOG_LEVEL=ERROR
OUT=${OUT:-/tmp/gpu_check}
M=${1:-examples/torch_models.py:resnet50}
B=32
mkdir -p "$OUT"
dl() { python3 -m dlsched.cli.main "$@"; }
step() { echo; echo "=== $* ($(date +%T))"; }

step "machine"
nvidia-smi -L 2>/dev/null
python3 -c "import sys, torch; c = torch.cuda.is_available(); print('python', sys.version.split()[0], 'torch', \
torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name() if c else 'no GPU', \
'nccl', torch.cuda.nccl.version() if c else '-')"

step "1. GPU profiler: dlsched profile --device cuda"
dl profile "$M" --mode training --batch $B --device cuda -o "$OUT/oracle_cuda.csv"; echo "rc=$?"
python3 -c "import torch; from dlsched.profiling.torch_profiler import _spin_rate, _event_floor
if torch.cuda.is_available():
    r = _spin_rate(); print(f'spin {r / 1e9:.3f} Gcycles/s, event floor {_event_floor(r) * 1e6:.2f} us')"

for dp in ddp fsdp; do
    step "2. real $dp over NCCL under torchrun (1 process: one GPU), profiled"
    torchrun --nproc-per-node 1 --master-port 29517 benchmarks/gpu_trace_job.py "$M" --dp $dp --batch $B \
        --out "$OUT/$dp"; echo "rc=$?"
    step "3. dlsched trace on the $dp trace"
    dl trace "$OUT/$dp"; echo "rc=$?"
    dl trace "$OUT/$dp" --json > "$OUT/${dp}_trace.json"; echo "rc=$?"
done

step "4. the DDP trace imported: dlsched profile --from-trace"
dl profile "$M" --mode training --batch $B --from-trace "$OUT/ddp/rank0.json" -o "$OUT/oracle_trace.csv"
echo "rc=$?"

step "5. the GPU profiler's oracle against the trace's kernels and the measured step"
python3 benchmarks/gpu_oracle_check.py "$OUT"

step "6. the tests marked gpu"
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_torch_profiler.py 2>&1 | tail -15

step "done"
for f in "$OUT"/ddp/rank0.json "$OUT"/fsdp/rank0.json; do [ -f "$f" ] && gzip -c "$f" > "$f.gz" && rm "$f"; done
ls -la "$OUT" "$OUT"/ddp "$OUT"/fsdp 2>/dev/null
