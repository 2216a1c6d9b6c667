#!/usr/bin/env bash
# One device call that checks a commit on the GPU machine: the GPU test suite (correctness; timing tests left
# out), the golden suite again in CUDA graph mode, bloomery-serve on CUDA with a real request, and the
# full-size numbers (bench/results/run-h200.sh).
# Build here first: scripts/device-bundle.sh bloomery bloomery-serve test_gpu; then
#   device run: carry [".devcarry"], command: bash scripts/gpu-check-all.sh
# Budgets (seconds) via TESTS_TIMEOUT / FULL_TIMEOUT / MAX_SECONDS. Results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
B=.devcarry/bundle
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}" BLOOMERY_SOURCE_DIR="$PWD"

# 1. bloomery-serve -m <folder> alone on a CUDA machine: the engine it picks, /health, one chat completion.
$B/bin/bloomery-serve -m tests/fixtures/models/qwen4_exp-modelopt-mixed --port 8091 > "$out/serve.txt" 2>&1 &
srv=$!
for _ in $(seq 60); do
  python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8091/health')" 2>/dev/null && break
  sleep 0.5
done
python3 - > "$out/serve-reply.txt" 2>&1 <<'PY'
import json, urllib.request as u
req = u.Request('http://127.0.0.1:8091/v1/chat/completions', method='POST',
                headers={'Content-Type': 'application/json'},
                data=json.dumps({'messages': [{'role': 'user', 'content': 'Hello'}], 'max_tokens': 8,
                                 'temperature': 0}).encode())
print(u.urlopen(req, timeout=60).read().decode())
PY
echo "serve reply rc=$?"; kill $srv; wait $srv 2>/dev/null
grep -E "^engine|^decode|choice +engine" "$out/serve.txt"; head -c 600 "$out/serve-reply.txt"; echo

# 2. GPU tests (correctness; the timing tests are left out), eager launches.
BLOOMERY_CUDA_GRAPHS=0 timeout "${TESTS_TIMEOUT:-170}" $B/bin/test_gpu \
  --gtest_filter='*-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*:*Bench*' > "$out/gpu-tests.txt" 2>&1
echo "tests rc=$?"
grep -cE "^\[       OK \]" "$out/gpu-tests.txt"; grep -E "^\[  FAILED  \]|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]" "$out/gpu-tests.txt" | head -30

# 2b. The golden suite again with decode steps captured as CUDA graphs (step_graph.h, the default).
BLOOMERY_CUDA_GRAPHS=1 timeout "${GRAPH_TESTS_TIMEOUT:-120}" $B/bin/test_gpu --gtest_filter='*GoldenCuda*:*StepGraph*' \
  > "$out/gpu-tests-graphs.txt" 2>&1
echo "graph tests rc=$?"
grep -E "^\[  FAILED  \]|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]" "$out/gpu-tests-graphs.txt" | head -30

# 3. Full-size numbers (SKIP_FULL=1 leaves them out, e.g. when the call also runs an A/B).
[ -n "${SKIP_FULL:-}" ] && exit 0
BUNDLE=$B FIXTURE_TIMEOUT=40 FULL_TIMEOUT=${FULL_TIMEOUT:-280} MAX_SECONDS=${MAX_SECONDS:-120} \
  bash bench/results/run-h200.sh
