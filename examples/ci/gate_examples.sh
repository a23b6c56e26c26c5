#!/usr/bin/env bash
# dlsched gates its own example models: each is checked against the baseline
# committed beside this script (made with `dlsched snapshot`, options recorded
# in the file). `make test` runs this before the test suite.
set -euo pipefail
cd "$(dirname "$0")/../.."
DL=${DLSCHED:-.venv/bin/dlsched}
mkdir -p out/gate
status=0
for baseline in examples/ci/baselines/*.json; do
    spec=$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"]["spec"])' "$baseline")
    name=$(basename "$baseline" .json)
    echo "== dlsched check $spec against $baseline"
    $DL check "$spec" --baseline "$baseline" --junit "out/gate/$name.xml" || status=$?
done
exit $status
