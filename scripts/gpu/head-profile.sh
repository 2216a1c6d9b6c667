#!/usr/bin/env bash
# One device call (about 5 minutes): the GPU checks of a commit whose host code changed since its last card
# run, and the bench of the full-size decode step (issue 12).
#   1. the GPU suite (timing tests excluded), GoldenCuda, and the speculative-decoding tests on the card
#      (prompt cache, rollback, drafting on = off; BLOOMERY_SPEC_BACKEND=cuda);
#   2. the bench at C = 1 and 4 (graph mode: the issue's numbers);
#   Per-kernel profiles go through test_gpu (scripts/gpu/moe-profile.sh): Nsight Compute over the full bench
#   ran past every time limit on the H200 (2026-12-03).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden test_runtime,
#   tar -cJf .devcarry-all/b.txz .devcarry/bundle; lean-tree.sh on.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/head-profile.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
gpu_suite gpu-tests.txt '-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 220
golden_run golden.txt 80
BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=200 timeout 120 $B/bin/test_runtime --gtest_brief=1 \
  --gtest_filter='*SpecDecode*' > $out/spec-cuda.txt 2>&1
echo "spec cuda rc=$?"; grep -E "PASSED|FAILED|tests ran" $out/spec-cuda.txt | head -8
pack
bench=($B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096)
timeout 80 "${bench[@]}" -c 1,4 -r 1 --json-out $out/bench.json > $out/bench.txt 2>&1
echo "bench rc=$?"; grep -E "^\| tg|copy bandwidth" $out/bench.txt | head -4
pack
find $out -mindepth 1 -not -name all.tgz -delete
