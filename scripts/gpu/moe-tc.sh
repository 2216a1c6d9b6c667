#!/usr/bin/env bash
# Device calls for the tensor-core NVFP4 routed-expert decode (moe/moe_decode_tc.cu, decode variant 3; issue 12)
# and the combine that issues all slots' loads first.
#   check: the routed-expert tests (every variant against the CPU, bad ids, repeats), the decode bandwidth per
#          layer (v1 | v2 | v3 kernels), GoldenCuda with variant 3, and bench --ab moe-tc (v2 against v3 in one
#          process, qwen4_exp tg32 d4096, C = 1 and 4, three repeats).
#   ab:    the routed-expert tests and bandwidth again, then main's binary (/tmp/main-bin, from
#          .devcarry-all/main.txz) against the change, process by process, three rounds at C = 1 and 4; then
#          the GPU suite (not with `ab quick`, for a change inside the routed-expert kernels) and GoldenCuda
#          at the change's defaults. ab-only: the process-by-process rounds alone.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden test_runtime,
#   tar -cJf .devcarry-all/b.txz .devcarry/bundle (and main.txz for ab); lean-tree.sh on.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/moe-tc.sh check|ab [quick]
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
    BLOOMERY_CUDA_MOE_DECODE=3 golden_run golden-v3.txt
    pack
    timeout 120 $B/bin/bloomery "${bench[@]}" -c 1,4 -r 3 --ab moe-tc --json-out $out/ab-moe-tc.json \
      > $out/ab-moe-tc.txt 2>&1
    echo "ab moe-tc rc=$?"; grep -E "^\| tg|copy bandwidth" $out/ab-moe-tc.txt
    pack
    ;;
  ab | ab-only)
    if [ "$1" = ab-only ]; then
      ab_processes ab.txt 60 "${bench[@]}" -c 1,4 -r 1
      pack && find $out -mindepth 1 -not -name all.tgz -delete && exit 0
    fi
    timeout 150 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='CudaMoe.*-CudaMoe.DecodeBandwidth' \
      > $out/moe-tests.txt 2>&1
    echo "moe tests rc=$?"; grep -E "FAILED|PASSED|Failure" $out/moe-tests.txt | head -20
    timeout 100 $B/bin/test_gpu --gtest_filter='CudaMoe.DecodeBandwidth' > $out/moe-bandwidth.txt 2>&1
    echo "bandwidth rc=$?"; grep -E "moe-bench" $out/moe-bandwidth.txt | grep -E "NVFP4.*(decode|kernels)" | head -20
    pack
    ab_processes ab.txt 60 "${bench[@]}" -c 1,4 -r 1
    pack
    [ "${2:-}" = quick ] || gpu_suite gpu-tests.txt '-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 220
    pack
    golden_run
    pack
    ;;
esac
find $out -mindepth 1 -not -name all.tgz -delete
