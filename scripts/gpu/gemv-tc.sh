#!/usr/bin/env bash
# Device call for the decode GEMV on the tensor cores (gemv/gemv_tc.cu, issues 12 and 13), and GoldenCuda with
# the tree's defaults and with it on: its tests against
# the double-precision reference and the split-K kernel (bit-equal grouped and fused forms), the CudaLinear suite
# with it switched on, its isolated bandwidth beside the split-K kernel, then the full-size decode step with it
# off and on in one process (--ab gemv-tc, three rounds, C = 1 and 4), the MTP verify costs both ways, and the
# GPU suite at the tree's defaults.
# Build and carry: as scripts/gpu/flash-attn.sh. device run, carry [".devcarry-all"],
#   command: bash scripts/gpu/gemv-tc.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
timeout 120 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='CudaLinear.GemvTc*' > $out/gemv-tc-tests.txt 2>&1
echo "gemv-tc tests rc=$?"; grep -E "FAILED|PASSED|Failure|tests ran|Expected|Which is" $out/gemv-tc-tests.txt | head -30
BLOOMERY_CUDA_GEMV_TC=1 timeout 120 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='CudaLinear.*:BlockOps.*-*Bandwidth*' \
  > $out/linear-tc-on.txt 2>&1
echo "CudaLinear+BlockOps with gemv-tc on rc=$?"; grep -E "FAILED|PASSED|Failure|tests ran" $out/linear-tc-on.txt | head -20
timeout 120 $B/bin/test_gpu --gtest_filter='CudaLinear.GemvTcBandwidth' > $out/gemv-tc-bandwidth.txt 2>&1
echo "bandwidth rc=$?"; grep -vE "^\[ |^$|Note:" $out/gemv-tc-bandwidth.txt | head -60
# GoldenCuda with every default of this tree (prompt attention on the tensor cores included), and with the
# tensor-core GEMV on.
timeout 120 $B/bin/test_golden --gtest_brief=1 > $out/golden.txt 2>&1
echo "test_golden rc=$?"; grep -E "PASSED|FAILED|SKIPPED|tests ran" $out/golden.txt | head -5
timeout 150 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='*GoldenCuda*' > $out/golden-cuda.txt 2>&1
echo "GoldenCuda rc=$?"; grep -E "PASSED|FAILED|SKIPPED|tests ran" $out/golden-cuda.txt | head -5
BLOOMERY_CUDA_GEMV_TC=1 timeout 150 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='*GoldenCuda*' \
  > $out/golden-cuda-tc.txt 2>&1
echo "GoldenCuda gemv-tc rc=$?"; grep -E "PASSED|FAILED|SKIPPED|tests ran" $out/golden-cuda-tc.txt | head -5
pack
tg=(bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096)
timeout 200 $B/bin/bloomery "${tg[@]}" -c 1,4 -r 3 --ab gemv-tc --json-out $out/ab-tg.json > $out/ab-tg.txt 2>&1
echo "tg ab rc=$?"; grep -E "^\| tg|copy bandwidth" $out/ab-tg.txt
pack
for v in 0 1; do
  BLOOMERY_CUDA_GEMV_TC=$v timeout 120 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 16 -d 4096 \
    -c 1 -r 1 --spec-rows 2,4,8 --json-out $out/spec-tc$v.json > $out/spec-tc$v.txt 2>&1
  echo "spec rows gemv-tc=$v rc=$?"; grep -E "^\| (tg|verify|draft)" $out/spec-tc$v.txt
done
pack
# The whole GPU suite (timing tests excluded) on this tree's defaults.
gpu_suite gpu-tests.txt '-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 200
pack
find $out -mindepth 1 -not -name all.tgz -delete
