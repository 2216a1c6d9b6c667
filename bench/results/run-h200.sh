#!/usr/bin/env bash
# The numbers of docs/performance.md on one H200, from the bundle built by
#   BUILD_DIR=build-b1 BUNDLE=.devcarry-b1/bundle scripts/device-bundle.sh bloomery
# Device call: carry [".devcarry-b1"], command: bash bench/results/run-h200.sh  (about 6 minutes at most).
# Writes the raw JSON and the tables under $OUT (or /tmp); copy the JSON into bench/results/.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
B=${BUNDLE:-.devcarry-b1/bundle}
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
X=$B/bin/bloomery
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
free -g | head -2
(while sleep 5; do nvidia-smi --query-gpu=memory.used --format=csv,noheader; done) > "$out/gpu-mem.txt" 2>&1 &
mon=$!
# 1. Load time of the largest fixture folder (and a small end-to-end bench on it).
timeout ${FIXTURE_TIMEOUT:-60} $X bench --backend cuda -m tests/fixtures/models/qwen4_exp-bf16 -p 64 -n 16 -r 3 \
  --json-out "$out/fixture-qwen4_exp-bf16-cuda.json" > "$out/fixture.txt" 2>&1
echo "fixture rc=$?"; tail -6 "$out/fixture.txt"
# 2. Full-size synthetic Qwen3.8-Flash-Next (NVIDIA export formats): build, copy bandwidth, pp4096 (TTFT),
#    tg32 at depth 4096 with C = 1, 4, 16. Tests that would start after 240 s of measuring are skipped.
timeout ${FULL_TIMEOUT:-420} $X bench --backend cuda --synthetic qwen4_exp -p 4096 --pp-depths 0 --pp-concurrent 1 \
  -n 32 -d 4096 -c 1,4,16 -r 2 --max-seconds ${MAX_SECONDS:-240} --json-out "$out/qwen4_exp-synthetic-nvidia-h200.json" \
  > "$out/full.txt" 2>&1
echo "full rc=$?"; tail -14 "$out/full.txt"
kill $mon 2>/dev/null
sort -n "$out/gpu-mem.txt" | tail -1
