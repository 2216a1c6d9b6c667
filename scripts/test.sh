#!/usr/bin/env bash
# Every test: installs dependencies, builds, runs the unit/golden/e2e tests (ctest), then the fuzzers for a
# bounded time each. GPU tests are built but only run on a GPU machine (scripts/gpu-test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install-deps.sh
build_start=$(date +%s)
scripts/build.sh
echo "test.sh: build took $(( $(date +%s) - build_start )) s"
ctest --test-dir build --output-on-failure -j"$(nproc)" -LE gpu
if [ -f fuzz/run.sh ]; then
  bash fuzz/run.sh
fi
echo "test.sh: total $(( $(date +%s) - start )) s"
