#!/usr/bin/env bash
# glm5_next on the card (issue 16 items 1-2) and the qwen3_next synthetic bench (issue 12 item 5), one device
# call, under 4 minutes. Build the bundle here first:
#   BUILD_DIR=build-h BUNDLE=.devcarry-glm/bundle scripts/device-bundle.sh bloomery test_gpu
# then: device run, carry [".devcarry-glm"], command: bash scripts/gpu/glm.sh
# Logs go to $OUT: glm-ops.txt, golden-glm-eager.txt, golden-glm-graphs.txt, bench-glm5.txt, bench-qwen3.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
B=${BUNDLE:-.devcarry-glm/bundle}
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}" BLOOMERY_SOURCE_DIR="$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# 1. Every glm5_next op against the CPU op on random inputs (tests/gpu/glm_ops_test.cc).
BLOOMERY_CUDA_GRAPHS=0 timeout 40 $B/bin/test_gpu --gtest_filter='GlmOps.*' > "$out/glm-ops.txt" 2>&1
echo "glm ops rc=$?"; grep -E "^\[  FAILED  \]|^\[  PASSED  \]|Failure|Expected|Which is|actual" "$out/glm-ops.txt" | head -40

# 2. GoldenCuda on every glm5_next fixture × layout, eager and with decode steps captured as CUDA graphs.
BLOOMERY_CUDA_GRAPHS=0 timeout 60 $B/bin/test_gpu --gtest_filter='*GoldenCuda*glm5*' > "$out/golden-glm-eager.txt" 2>&1
echo "golden eager rc=$?"; grep -E "^\[  FAILED  \]|^\[  PASSED  \]|^\[  SKIPPED \]|top-1|Failure" "$out/golden-glm-eager.txt" | head -60
BLOOMERY_CUDA_GRAPHS=1 timeout 30 $B/bin/test_gpu --gtest_filter='*GoldenCuda*glm5*' > "$out/golden-glm-graphs.txt" 2>&1
echo "golden graphs rc=$?"; grep -E "^\[  FAILED  \]|^\[  PASSED  \]|Failure" "$out/golden-glm-graphs.txt" | head -20

# 3. The synthetic benches: glm5_next at full shapes cut to 8 layers (3 dense, 5 sparse, 2 DSA, + NextN), and
# Qwen3-Next-80B-A3B in the NVIDIA ModelOpt NVFP4 layout cut to 12 layers (to stay inside the time budget).
timeout 70 $B/bin/bloomery bench --backend cuda --synthetic glm5_next --layers 8 -p 512 -n 16 -c 1 -r 2 \
  --json-out "$out/bench-glm5.json" > "$out/bench-glm5.txt" 2>&1
echo "bench glm5_next rc=$?"; tail -n 12 "$out/bench-glm5.txt"
timeout 35 $B/bin/bloomery bench --backend cuda --synthetic qwen3_next --layers 12 -p 512 -n 16 -c 1 -r 2 \
  --json-out "$out/bench-qwen3.json" > "$out/bench-qwen3.txt" 2>&1
echo "bench qwen3_next rc=$?"; tail -n 12 "$out/bench-qwen3.txt"
