#!/usr/bin/env bash
# The walkthrough `make demo` runs on the bundled example ResNet-50:
# inspect -> profile -> bounds -> TIC/TAC priority files -> simulate against
# random order (Gantt chart) -> batch plans. Outputs land in out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
DL=.venv/bin/dlsched
OUT=${DEMO_OUT:-out/demo}
MODEL=examples/torch_models.py:resnet50
# Training iteration, batch 8, parameters spread over 2 servers. The links are
# 1 Gbit/s: on a CPU the compute is ~50x slower than on a GPU, and a slower
# link keeps transfers and compute in the balance TicTac studies.
COMMON=(--mode training --batch 8 --ps 2)
NET=(--bandwidth 1Gbps --latency 50us)
DAG=$OUT/resnet50.train.dag.json
mkdir -p "$OUT"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. inspect: trace the training step once and save the DAG"
$DL inspect $MODEL "${COMMON[@]}" --save "$DAG"

step "2. profile: time every op 5 times on the CPU, keep the minimum"
$DL profile $MODEL "${COMMON[@]}" "${NET[@]}" --runs 5 -o "$OUT/oracle.csv"

step "3. bounds: how much can transfer order matter?"
$DL bounds "$DAG" --oracle "$OUT/oracle.csv"

step "4. order: TIC (needs no oracle) and TAC priority files"
$DL order "$DAG" --algo tic -o "$OUT/tic.json"
$DL order "$DAG" --algo tac --oracle "$OUT/oracle.csv" -o "$OUT/tac.json"

step "5. simulate: TAC enforced, with a Gantt chart and a Perfetto trace"
$DL simulate "$DAG" --oracle "$OUT/oracle.csv" --priorities "$OUT/tac.json" \
    --plot "$OUT/tac-gantt.png" --trace-out "$OUT/tac-trace.json"

step "6. simulate: 4 workers sharing the servers, 20 iterations, orders side by side"
$DL simulate "$DAG" --oracle "$OUT/oracle.csv" --workers 4 --iterations 20 --jitter 0.05 --sharing serial \
    --compare tic,tac,random,topo

step "7. plan-batch: largest batch in 16 GiB, and a heterogeneous split of 512 samples"
$DL plan-batch $MODEL --memory 16GiB --optimizer momentum
# Speeds are relative to the profiled CPU; the oracle turns them into seconds.
$DL plan-batch $MODEL --batch 8 --oracle "$OUT/oracle.csv" --global-batch 512 \
    --worker v100:16GiB:1.0 --worker a100:40GiB:2.5 --worker t4:16GiB:0.6 --worker a10:24GiB:1.2

printf '\nOutputs in %s/: DAG, oracle, priority files, Gantt chart, Chrome trace.\n' "$OUT"
