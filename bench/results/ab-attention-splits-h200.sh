#!/usr/bin/env bash
# A/B of the split-KV decode attention's keys per split (attention.cu kSplitKeys 512 → 128) on full-size
# synthetic Qwen3.8-Flash-Next: main's bloomery (.devcarry/main/bin) and the change's (.devcarry/bundle/bin)
# run alternately, three rounds, tg32 at depth 4096 with C = 1 and 4; the change's GPU correctness tests first.
# Build: copy main's stripped bloomery to .devcarry/main/bin, then scripts/device-bundle.sh for the change.
# Device call: carry [".devcarry"], command: bash bench/results/ab-attention-splits-h200.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/.devcarry/bundle/lib:${LD_LIBRARY_PATH:-}" BLOOMERY_SOURCE_DIR="$PWD"
timeout 150 .devcarry/bundle/bin/test_gpu --gtest_filter='*GoldenCuda*:*ttention*:*StepGraph*:CudaOps.Timings' \
  > "$out/tests.txt" 2>&1
echo "tests rc=$?"; grep -E "^\[  FAILED  \]|^\[  PASSED  \]|attention decode" "$out/tests.txt" | head -20
grep -q "^\[  FAILED  \]" "$out/tests.txt" && exit 1
for round in 1 2 3; do
  for side in main bundle; do
    timeout 100 .devcarry/$side/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4 \
      -r 1 --json-out "$out/$side-r$round.json" > "$out/$side-r$round.txt" 2>&1
    echo "$side round $round rc=$? $(grep -E '^\| tg' "$out/$side-r$round.txt" | awk -F'|' '{printf "c%s %s t/s %s ms; ", $4, $5, $6}')"
  done
done
