#!/usr/bin/env bash
# Device calls for the BF16 K/V cache (-ctk/-ctv bf16; issue 13's KV element types, issue 12's bytes at depth).
#   check: the whole GPU suite (the BF16-cache attention, copy and MLA tests among it), GoldenCuda
#          with both engines' caches in BF16 (BLOOMERY_GOLDEN_KV=bf16), the speculative-decoding tests on the
#          card over BF16 caches (Bf16Kv/SpecDecode.*), and the decode attention timings f32 vs BF16;
#   ab:    `bench -ctk f32` against `bench -ctk bf16`, process by process, three rounds in alternation: full-size
#          synthetic qwen4_exp (nvidia layout), pp4096 and tg32 at depth 4096, C = 1 and 4. Should improve:
#          tg at depth (attention reads half the bytes), pp (no rounding pass of K/V). Must not worsen either.
#          If every round favours bf16 by more than f32's spread and `check` passes, kDefaultKvType
#          (models/kv_cache_type.h) becomes BF16 on the card.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_runtime,
#   tar -cJf .devcarry-all/b.txz .devcarry/bundle; device run, carry [".devcarry-all"],
#   command: bash scripts/gpu/kv-bf16.sh MODE... (check, spec, ab; in that order when several)
#   spec:  the speculative-decoding tests on the card (every fixture, f32 and BF16 caches, 1000 greedy tokens).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
# LAYERS=N cuts the synthetic model to N layers (the full 48 need an H200's memory; an H100 holds 24).
q=(bench --backend cuda --synthetic qwen4_exp ${LAYERS:+--layers $LAYERS} -p 4096 --pp-depths 0 -n 32 -d 4096 -c 1,4 -r 1)
for mode in "${@:-check}"; do
case "$mode" in
  check)  # about 7 minutes
    gpu_suite gpu-tests.txt "" 260
    pack
    BLOOMERY_GOLDEN_KV=bf16 timeout 200 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='*GoldenCuda*' \
      > $out/golden-cuda-bf16kv.txt 2>&1
    echo "GoldenCuda bf16 kv rc=$?"; grep -E "FAILED|PASSED|Failure|gate:" $out/golden-cuda-bf16kv.txt | head -20
    pack
    BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout 120 $B/bin/test_runtime --gtest_brief=1 \
      --gtest_filter='Bf16Kv/SpecDecode.*' > $out/spec-cuda-bf16kv.txt 2>&1
    echo "spec cuda bf16 kv rc=$?"; grep -E "FAILED|PASSED|Failure" $out/spec-cuda-bf16kv.txt | head
    pack
    timeout 90 $B/bin/test_gpu --gtest_filter='CudaOps.AttentionDecodeTimings' > $out/attention-timings.txt 2>&1
    echo "timings rc=$?"; grep -E "^\[time\]" $out/attention-timings.txt | head -20
    pack
    ;;
  spec)  # about 2 minutes
    BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout 200 $B/bin/test_runtime --gtest_brief=1 \
      --gtest_filter='*SpecDecode.*' > $out/spec-cuda.txt 2>&1
    echo "spec cuda rc=$?"; grep -E "FAILED|PASSED|Failure|first difference|dlogit" $out/spec-cuda.txt | head -60
    pack
    ;;
  ab)  # about 8 minutes
    for r in 1 2 3; do
      for kv in f32 bf16; do
        timeout 80 $B/bin/bloomery "${q[@]}" -ctk $kv --json-out $out/$kv-$r.json > $out/$kv-$r.txt 2>&1
        grep -E "^\| (tg|pp)" $out/$kv-$r.txt | sed "s/^/$kv round $r: /"
      done
    done | tee $out/ab-rounds.txt
    pack
    ;;
esac
done
find $out -mindepth 1 -not -name all.tgz -delete
