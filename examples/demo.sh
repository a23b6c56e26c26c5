#!/usr/bin/env bash
# The walkthrough `make demo` runs on the bundled example ResNet-50.
set -euo pipefail
cd "$(dirname "$0")/.."
DL=.venv/bin/dlsched
OUT=${DEMO_OUT:-out/demo}
mkdir -p "$OUT"
MODEL=examples/torch_models.py:resnet50

echo "== 1. inspect: what the training DAG holds"
$DL inspect $MODEL --mode training --save "$OUT/resnet50.train.dag.json"
