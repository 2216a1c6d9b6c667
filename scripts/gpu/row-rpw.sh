#!/usr/bin/env bash
# One device call of under ten minutes on one bundle (issues 12 and 15), the most needed first, packing after
# every step so that a call cut off returns what ran:
#   1. the GPU tests of code not yet run on a card: CudaLinear.* (OneRowKernelRowsPerWarpKeepTheBits: the one-row
#      kernel with 2 and 4 weight rows a warp gives R = 1's bits; SplitKOneRowFourRowsAWarpKeepTheBits: the same
#      for the split-K kernel at one row), BlockOps.* and CudaOps.* (the shared GDN gate
#      and gated-norm device functions of f9942a4), GoldenCuda;
#   2. the one-row kernel's rows per warp, tg32 d4096 C = 1 in one process, three repeats: --ab gemv-row-r2
#      and gemv-row-r4 on qad (its MXFP8 projections), gemv-row-r2 on nvidia (its BF16 ones); --ab gemv-split-r4
#      on qwen3_next (its NVFP4 projections take the split-K kernel) and on qad (the HC up product, K = 320);
#   3. the speculative-decoding suite on the card (BLOOMERY_SPEC_BACKEND=cuda, 1,000 tokens) with plain BF16
#      prompt GEMMs (BLOOMERY_CUDA_GEMM=bf16): the state checks' BF16 tolerance of 30a6992;
#   4. pp4096 in both prompt GEMM modes in one process (--ab gemm-bf16, three repeats), nvidia and qad.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_runtime test_golden,
#   tar -c .devcarry/bundle | xz -T2 -6 > .devcarry-all/b.txz; the lean tree (scripts/gpu/lean-tree.sh).
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/row-rpw.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
tg=(-p 0 -n 32 -d 4096 -r 3)

timeout 150 $B/bin/test_gpu --gtest_brief=1 \
  --gtest_filter='CudaLinear.*:BlockOps.*:CudaOps.*:*GoldenCuda*:-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*:*Sweep*' \
  > $out/gpu-tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "FAILED|PASSED|tests ran|Failure" $out/gpu-tests.txt | head -20
pack

for ab in qad:gemv-row-r2 qad:gemv-row-r4 nvidia:gemv-row-r2 qwen3_next:gemv-split-r4 qad:gemv-split-r4; do
  layout=${ab%%:*} knob=${ab#*:}
  model=(--synthetic qwen4_exp --synthetic-layout $layout)
  [ $layout = qwen3_next ] && model=(--synthetic qwen3_next)
  timeout 100 $B/bin/bloomery bench --backend cuda "${model[@]}" \
    "${cut[@]}" "${tg[@]}" -c 1 --ab $knob --json-out $out/$knob-$layout.json > $out/$knob-$layout.txt 2>&1
  grep -E "^\| tg" $out/$knob-$layout.txt | sed "s/^/$knob $layout: /"
  pack
done

BLOOMERY_CUDA_GEMM=bf16 BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout 150 $B/bin/test_runtime \
  --gtest_brief=1 --gtest_filter='*SpecDecode*' > $out/spec-cuda-bf16.txt 2>&1
echo "spec cuda bf16 rc=$?"; grep -E "FAILED|PASSED|tests ran" $out/spec-cuda-bf16.txt | head -20
pack

for layout in nvidia qad; do
  timeout 90 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout \
    "${cut[@]}" -p 4096 --pp-depths 0 -n 0 -r 3 --ab gemm-bf16 --json-out $out/pp-$layout.json \
    > $out/pp-$layout.txt 2>&1
  grep -E "^\| pp" $out/pp-$layout.txt | sed "s/^/gemm-bf16 $layout: /"
  pack
done
find $out -mindepth 1 -not -name all.tgz -delete
