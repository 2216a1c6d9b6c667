#!/usr/bin/env bash
# Multi-row decode GEMV with x loaded once per warp (issue 12 item 3, issue 13's verify cost), one device call:
# the GPU suite (GemvXOnceEqualsPerRowLoads checks the bits) and GoldenCuda, GEMV times per decode shape with it
# off and on, the tg A/B at C = 1 and 4 (rows tgN: x per weight row, tgN+x-once), the spec cost rows, and issue
# 14's qwen4_exp fp4local-csf transformers golden from the saved master. Build first:
#   scripts/device-bundle.sh && mkdir -p .devcarry-all && tar -czf .devcarry-all/b.tgz .devcarry/bundle
# then: device run, carry [".devcarry-all"], command: bash scripts/gpu/gemv-x.sh    ($OUT/all.tgz)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
# Packed after every step, so that a call cut off by its time limit still returns what ran (one file).
gpu_suite gpu-tests.txt '' 220
timeout 60 $B/bin/test_golden --gtest_brief=1 > $out/golden.txt 2>&1
echo "golden rc=$?"; grep -E "PASSED|FAILED|tests ran" $out/golden.txt | head
pack
for x in 0 1; do
  BLOOMERY_CUDA_GEMV_X_ONCE=$x timeout 40 $B/bin/test_gpu --gtest_filter=CudaLinear.GemvBandwidth > $out/gemv-x$x.txt 2>&1
  echo "gemv shapes x_once=$x rc=$?"; grep -E "T=8|gemv-shape\] BF16" $out/gemv-x$x.txt
done
timeout 150 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4 -r 3 --ab gemv-x \
  --json-out $out/ab-gemv-x.json > $out/ab-gemv-x.txt 2>&1
echo "ab rc=$?"; grep -E "^\| tg" $out/ab-gemv-x.txt
pack
timeout 90 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 16 -d 4096 -c 1 -r 3 \
  --spec-rows 2,4,8,9 --json-out $out/spec-cost.json > $out/spec-cost.txt 2>&1
echo "spec rc=$?"; grep -E "^\| (tg|verify|draft)" $out/spec-cost.txt
pack
LAYOUTS=fp4local-csf FROM_MASTER_DIR=$(bash reference/trained/rebuild_masters.sh /tmp/masters) FAMILIES=qwen4_exp OUT=$out/trained timeout 150 \
  bash scripts/gpu/trained.sh > $out/trained.log 2>&1
echo "trained rc=$?"; grep -E "PASS|FAIL|PPL" $out/trained.log | head -20
pack
find $out -mindepth 1 -not -name all.tgz -delete
