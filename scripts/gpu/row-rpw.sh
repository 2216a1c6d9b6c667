#!/usr/bin/env bash
# One device call of at most BUDGET seconds (default 470; a step that could end past it is skipped) on one
# bundle (issues 12, 13 and 15), the most needed first, packing after every step so that a call cut off returns
# what ran:
#   1. the GPU tests of code not yet run on a card: CudaLinear.* (OneRowKernelRowsPerWarpKeepTheBits: the one-row
#      kernel with 2 and 4 weight rows a warp gives R = 1's bits; SplitKOneRowFourRowsAWarpKeepTheBits: the same
#      for the split-K kernel at one row; OneRowKernelOnSeveralRowsOfXGivesEachRowItsOneRowBits: the one-row
#      kernel on 2-4 rows of x), BlockOps.* and CudaOps.*, GoldenCuda;
#   2. the A/Bs in one process each, three repeats, tg32 at depth 4096: --ab gemv-row-multi (2-4 rows of x on
#      the one-row kernel instead of the tensor-core GEMV) at C = 1 and 4 with --spec-rows 2,4 (verify rows in
#      both settings) on nvidia, --ab gemv-row-r2 on qad (MXFP8 one-row products, 2 weight rows a warp), then
#      gemv-row-multi on qad;
#   3. the speculative-decoding suite on the card (BLOOMERY_SPEC_BACKEND=cuda, 1,000 tokens) with plain BF16
#      prompt GEMMs (BLOOMERY_CUDA_GEMM=bf16): the state checks' BF16 tolerance of 30a6992, and the batched
#      draft catch-up of a861ee6 (SpecDecode.PlainRowsOfSeveralSlotsCatchUpInOneDraftPass);
#   4. pp4096 in both prompt GEMM modes in one process (--ab gemm-bf16, three repeats), nvidia and qad;
#   5. if time is left: gemv-row-r2 on nvidia, gemv-row-r4 on qad, gemv-split-r4 on qwen3_next and qad.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_runtime test_golden,
#   tar -c .devcarry/bundle | xz -T2 -6 > .devcarry-all/b.txz; the lean tree (scripts/gpu/lean-tree.sh).
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/row-rpw.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
start=$SECONDS
tg=(-p 0 -n 32 -d 4096 -r 3)

# TESTS narrows the GPU tests (a short call: the new kernels' tests and GoldenCuda).
timeout 120 $B/bin/test_gpu --gtest_brief=1 \
  --gtest_filter="${TESTS:-CudaLinear.*:BlockOps.*:CudaOps.*:*GoldenCuda*}:-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*:*Sweep*" \
  > $out/gpu-tests.txt 2>&1
echo "gpu tests rc=$? at $((SECONDS - start)) s"; grep -E "FAILED|PASSED|tests ran|Failure" $out/gpu-tests.txt | head -20
pack

# The call's own budget (BUDGET seconds, default 470): a step that could end past it is skipped.
budget=${BUDGET:-470}
fits() { [ $((SECONDS - start + $1)) -le $budget ] || { echo "skipped (${2}): would pass ${budget} s"; false; }; }

# ab LAYOUT KNOB LIMIT [extra bench args…]: one A/B process, its tg and spec rows printed.
ab() {
  local layout=$1 knob=$2 limit=$3
  shift 3
  fits $limit "$knob $layout" || return 0
  local model=(--synthetic qwen4_exp --synthetic-layout $layout)
  [ $layout = qwen3_next ] && model=(--synthetic qwen3_next)
  timeout $limit $B/bin/bloomery bench --backend cuda "${model[@]}" "${cut[@]}" "${tg[@]}" --ab $knob "$@" \
    --json-out $out/$knob-$layout.json > $out/$knob-$layout.txt 2>&1
  echo "$knob $layout rc=$? at $((SECONDS - start)) s"
  grep -E "^\| (tg|verify|draft)" $out/$knob-$layout.txt | sed "s/^/$knob $layout: /"
  pack
}

ab nvidia gemv-row-multi 100 -c 1,4 --spec-rows 2,4
ab qad gemv-row-r2 70 -c 1
ab qad gemv-row-multi 100 -c 1,4 --spec-rows 2,4

fits 120 "spec suite" && BLOOMERY_CUDA_GEMM=bf16 BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout 120 $B/bin/test_runtime \
  --gtest_brief=1 --gtest_filter='*SpecDecode*' > $out/spec-cuda-bf16.txt 2>&1
echo "spec cuda bf16 rc=$? at $((SECONDS - start)) s"; grep -E "FAILED|PASSED|tests ran" $out/spec-cuda-bf16.txt | head -20
pack

for layout in nvidia qad; do
  fits 70 "pp $layout" || continue
  timeout 70 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout \
    "${cut[@]}" -p 4096 --pp-depths 0 -n 0 -r 3 --ab gemm-bf16 --json-out $out/pp-$layout.json \
    > $out/pp-$layout.txt 2>&1
  echo "pp $layout rc=$? at $((SECONDS - start)) s"
  grep -E "^\| pp" $out/pp-$layout.txt | sed "s/^/gemm-bf16 $layout: /"
  pack
done

for spec in nvidia:gemv-row-r2 qad:gemv-row-r4 qwen3_next:gemv-split-r4 qad:gemv-split-r4; do
  ab ${spec%%:*} ${spec#*:} 70 -c 1
done
find $out -mindepth 1 -not -name all.tgz -delete
