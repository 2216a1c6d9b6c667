#!/usr/bin/env bash
# Device calls for the tensor-core NVFP4 routed-expert decode (moe/moe_decode_tc.cu, decode variant 3; issue 12)
# and the combine that issues all slots' loads first.
#   check: the routed-expert tests (every variant against the CPU, bad ids, repeats), the decode bandwidth per
#          layer (v1 | v2 | v3 kernels), GoldenCuda with variant 3, and bench --ab moe-tc (v2 against v3 in one
#          process, qwen4_exp tg32 d4096, C = 1 and 4, three repeats).
#   ab:    the routed-expert tests and bandwidth again, then main's binary (/tmp/main-bin, from
#          .devcarry-all/main.txz) against the change, process by process, three rounds at C = 1 and 4; then
#          the GPU suite and GoldenCuda at the change's defaults.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden test_runtime,
#   tar -cJf .devcarry-all/b.txz .devcarry/bundle (and main.txz for ab); lean-tree.sh on.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/moe-tc.sh check|ab
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
bench=(bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096)
case "${1:-check}" in
  check)
    timeout 240 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='CudaMoe.*-CudaMoe.DecodeBandwidth' \
      > $out/moe-tests.txt 2>&1
    echo "moe tests rc=$?"; grep -E "FAILED|PASSED|Failure|Expected|Which is|max [0-9]" $out/moe-tests.txt |
      grep -E "FAILED|PASSED|Failure|v3" | head -40
    pack
    timeout 100 $B/bin/test_gpu --gtest_filter='CudaMoe.DecodeBandwidth' > $out/moe-bandwidth.txt 2>&1
    echo "bandwidth rc=$?"; grep -E "moe-bench" $out/moe-bandwidth.txt | grep -E "NVFP4|kernels" | head -30
    pack
    BLOOMERY_CUDA_MOE_DECODE=3 timeout 90 $B/bin/test_golden --gtest_brief=1 > $out/golden-v3.txt 2>&1
    echo "golden v3 rc=$?"; grep -E "PASSED|FAILED" $out/golden-v3.txt | head -5
    pack
    timeout 120 $B/bin/bloomery "${bench[@]}" -c 1,4 -r 3 --ab moe-tc --json-out $out/ab-moe-tc.json \
      > $out/ab-moe-tc.txt 2>&1
    echo "ab moe-tc rc=$?"; grep -E "^\| tg|copy bandwidth" $out/ab-moe-tc.txt
    pack
    ;;
  ab)
    timeout 150 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='CudaMoe.*-CudaMoe.DecodeBandwidth' \
      > $out/moe-tests.txt 2>&1
    echo "moe tests rc=$?"; grep -E "FAILED|PASSED|Failure" $out/moe-tests.txt | head -20
    timeout 100 $B/bin/test_gpu --gtest_filter='CudaMoe.DecodeBandwidth' > $out/moe-bandwidth.txt 2>&1
    echo "bandwidth rc=$?"; grep -E "moe-bench" $out/moe-bandwidth.txt | grep -E "NVFP4.*(decode|kernels)" | head -20
    pack
    tar -C /tmp -xJf .devcarry-all/main.txz
    for r in 1 2 3; do
      for v in main change; do
        run=($B/bin/bloomery); [ $v = main ] && run=(/tmp/main-bin/bloomery)
        timeout 60 "${run[@]}" "${bench[@]}" -c 1,4 -r 1 --json-out $out/$v-$r.json > $out/$v-$r.txt 2>&1
        grep -E "^\| tg" $out/$v-$r.txt | sed "s/^/$v round $r: /"
      done
    done | tee $out/ab.txt
    pack
    gpu_suite gpu-tests.txt '-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 220
    pack
    timeout 90 $B/bin/test_golden --gtest_brief=1 > $out/golden.txt 2>&1
    echo "golden rc=$?"; grep -E "PASSED|FAILED" $out/golden.txt | head -5
    pack
    ;;
esac
find $out -mindepth 1 -not -name all.tgz -delete
