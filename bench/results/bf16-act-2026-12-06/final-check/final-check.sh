#!/usr/bin/env bash
# (Record: ran on a tree whose prompt GEMM default was plain BF16, before it went back to split-BF16 for the
# speculative-decoding failures this run found; on later trees GoldenCuda here runs split-BF16 unless
# BLOOMERY_CUDA_GEMM=bf16 is set.)
# Device call (about 3 minutes): the last checks of the 2026-12-06 session's tree on the card — the accuracy
# gate (GoldenCuda) at the new default prompt GEMM mode (plain BF16 activations), the GEMV / GEMM unit tests in
# the split-BF16 reference mode the test environment sets (backend_util.h), and the speculative-decoding tests
# on the card (their prompts now take the default mode).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh test_gpu test_runtime, tar -c .devcarry/bundle |
#   xz -T2 -6 > .devcarry-all/b.txz; lean-tree.sh on. device run, carry [".devcarry-all"],
#   command: bash scripts/gpu/final-check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
timeout 110 $B/bin/test_gpu --gtest_brief=1 \
  --gtest_filter='*GoldenCuda*:CudaLinear.*:GemmTc*:-*Bandwidth*:*Timings*:*Throughput*:*Crossover*' \
  > $out/gpu-tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "FAILED|PASSED|tests ran|Failure" $out/gpu-tests.txt | head -20
pack
BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout 80 $B/bin/test_runtime --gtest_brief=1 \
  --gtest_filter='*SpecDecode*' > $out/spec-cuda.txt 2>&1
echo "spec cuda rc=$?"; grep -E "FAILED|PASSED|tests ran|Failure" $out/spec-cuda.txt | head
pack
