#!/usr/bin/env bash
# Device calls for the decode changes of 2026-12-04 (issue 12), after the graph-mode kernel profile
# (scripts/gpu/step-profile.sh, bench/results/step-profile-2026-12-04):
#   decode attention by KV head (attention/decode_attention.cu, --ab gqa-decode), the QSA block scores for
#   few rows (family/qsa_index.cu), the hyper-connection read's up product and mix in one pass
#   (family/hc_ple.cu, under --ab block-ops) and the GEMV launch sweep (CudaLinear.GemvLaunchSweepBandwidth).
#   check: the GPU suite (GoldenCuda included), the timing tests
#   and main's binary (.devcarry-all/main.txz) against this tree's, process by process, three rounds;
#   more: the in-process A/B of two switches, MTP verify costs and the qad layout.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden, tar -cJf
#   .devcarry-all/b.txz .devcarry/bundle; lean-tree.sh on. device run, carry [".devcarry-all"], command:
#   bash scripts/gpu/decode-fusions.sh check|more|confirm
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
q=(bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096)
case "${1:-check}" in
  check)  # about 8 minutes
    gpu_suite gpu-tests.txt '-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 200
    pack
    timeout 100 $B/bin/test_gpu --gtest_filter='CudaOps.AttentionDecodeTimings:Qwen4Ops.QsaSelectTiming:CudaLinear.GemvLaunchSweepBandwidth' \
      > $out/timings.txt 2>&1
    echo "timings rc=$?"; grep -E "^\[time\]|qsa_index|gemv-sweep-best" $out/timings.txt | head -40
    pack
    ab_processes ab-rounds.txt 60 "${q[@]}" -c 1,4 -r 1
    pack
    ;;
  more)  # about 5 minutes
    timeout 60 $B/bin/test_gpu --gtest_filter='BlockOps.*:CudaOps.Attention*:-*Timings*' > $out/block-ops-tests.txt 2>&1
    echo "block ops tests rc=$?"; grep -E "FAILED|PASSED|Failure" $out/block-ops-tests.txt | head
    pack
    for knob in gqa-decode block-ops; do
      timeout 90 $B/bin/bloomery "${q[@]}" -c 1,4 -r 3 --ab $knob > $out/ab-$knob.txt 2>&1
      echo "ab $knob rc=$?"; grep -E "^\| tg" $out/ab-$knob.txt
      pack
    done
    timeout 70 $B/bin/bloomery "${q[@]}" -c 1 -r 2 --spec-rows 2,4,8 > $out/spec-cost.txt 2>&1
    echo "spec rc=$?"; grep -E "^\| (tg|verify|draft)" $out/spec-cost.txt
    pack
    timeout 70 $B/bin/bloomery "${q[@]}" --synthetic-layout qad -c 1,4 -r 2 > $out/qad.txt 2>&1
    echo "qad rc=$?"; grep -E "^\| tg" $out/qad.txt
    pack
    ;;
  confirm)  # about 4 minutes: the fused up product and mix restricted to one row (after "more")
    timeout 40 $B/bin/test_gpu --gtest_filter='BlockOps.*' > $out/block-ops-tests.txt 2>&1
    echo "block ops tests rc=$?"; grep -E "FAILED|PASSED|Failure" $out/block-ops-tests.txt | head
    pack
    ab_processes ab-rounds.txt 50 "${q[@]}" -c 1,4 -r 1
    pack
    timeout 50 $B/bin/bloomery "${q[@]}" -c 1 -r 1 --spec-rows 2,4 > $out/spec-cost.txt 2>&1
    echo "spec rc=$?"; grep -E "^\| (tg|verify|draft)" $out/spec-cost.txt
    pack
    ;;
esac
find $out -mindepth 1 -not -name all.tgz -delete
