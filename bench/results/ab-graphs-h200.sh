#!/usr/bin/env bash
# A/B of CUDA graph decode steps (BLOOMERY_CUDA_GRAPHS) on full-size synthetic Qwen3.8-Flash-Next: one process,
# one set of weights, every tg row run repeat by repeat without and with graphs (bench --cuda-graphs ab),
# three rounds each, at depth 4096 with C = 1, 4, 16. Keep graphs on by default only if every round of every
# C favours them by more than the eager rounds' own spread (docs/performance.md).
# Build: BUILD_DIR=build BUNDLE=.devcarry/bundle scripts/device-bundle.sh bloomery
# Device call: carry [".devcarry/bundle"], command: bash bench/results/ab-graphs-h200.sh  (about 2 minutes).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
B=${BUNDLE:-.devcarry/bundle}
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
# BLOOMERY_CUDA_GRAPH_LAYERS (layers per recorded segment) and AB_CS (the C list) may be set; TAG names the run.
tag=${TAG:-}
timeout ${AB_TIMEOUT:-300} $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 \
  -c ${AB_CS:-1,4,16} -r 3 --cuda-graphs ab --json-out "$out/qwen4_exp-synthetic-graphs-ab-h200$tag.json" \
  > "$out/ab$tag.txt" 2>&1
echo "ab$tag rc=$?"; grep -E "^\| tg|CUDA graphs" "$out/ab$tag.txt"
