#!/usr/bin/env bash
# Issue 13's cost targets on the card: a 4-row MTP verify ≤ 1.3× a plain decode step, one draft step ≤ 15 %
# of it, on the full-size synthetic qwen4_exp (bench --spec-rows, docs/performance.md "Spec rows"). Run ON the
# GPU machine from a bundle built here with
#   BUILD_DIR=build-dev BUNDLE=.devcarry/bundle scripts/device-bundle.sh bloomery
# then a device call: carry [".devcarry"], command: bash scripts/gpu/spec-cost.sh
# CUDA graph steps (the default); EAGER=1 adds the same run with --cuda-graphs off. Output to $OUT (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
bundle=${BUNDLE:-.devcarry/bundle}
export LD_LIBRARY_PATH="$PWD/$bundle/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader
args=(bench --backend cuda --synthetic qwen4_exp -p 0 -n 16 -d 4096 -c 1 -r 3 --spec-rows 2,4,8,9)
timeout 280 "$bundle/bin/bloomery" "${args[@]}" --json-out "$out/spec-cost-graphs.json" 2>&1 |
  tee "$out/spec-cost-graphs.txt"
if [ "${EAGER:-0}" = 1 ]; then
  timeout 280 "$bundle/bin/bloomery" "${args[@]}" --cuda-graphs off --json-out "$out/spec-cost-eager.json" 2>&1 |
    tee "$out/spec-cost-eager.txt"
fi
