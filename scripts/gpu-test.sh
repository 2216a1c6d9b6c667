#!/usr/bin/env bash
# GPU tests, run ON the GPU machine from the bundle that scripts/device-bundle.sh built here:
#   device run: carry [".devcarry"], command: bash scripts/gpu-test.sh
# Runs every GPU test binary with the repo as working directory; logs go to $OUT (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/.devcarry/bundle/lib:${LD_LIBRARY_PATH:-}"
export BLOOMERY_SOURCE_DIR="$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
status=0
for t in .devcarry/bundle/bin/test_gpu; do
  [ -x "$t" ] || continue
  echo "== $t"
  "$t" --gtest_brief=1 2>&1 | tee -a "$out/gpu-tests.log" || status=1
done
exit $status
