#!/usr/bin/env bash
# GPU tests, run ON the GPU machine from the bundle that scripts/device-bundle.sh built here:
#   device run: carry [".devcarry"], command: bash scripts/gpu-test.sh [gtest filter]
# BUNDLE selects another bundle folder (default .devcarry/bundle). Runs the GPU test binary with the repo as
# working directory; logs go to $OUT (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
bundle=${BUNDLE:-.devcarry/bundle}
filter=${1:-*}
export LD_LIBRARY_PATH="$PWD/$bundle/lib:${LD_LIBRARY_PATH:-}"
export BLOOMERY_SOURCE_DIR="$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
status=0
for t in "$bundle"/bin/test_gpu; do
  [ -x "$t" ] || continue
  echo "== $t ($filter)"
  "$t" --gtest_brief=1 --gtest_filter="$filter" 2>&1 | tee -a "$out/gpu-tests.log" || status=1
done
exit $status
