#!/usr/bin/env bash
# Device call (about 8-9 minutes) for the one-row GEMV (issue 12: the qad / FP4-Local layout's MXFP8
# projections and the nvidia layout's BF16 ones at C = 1; gemv/gemv_row.cuh), and the first GPU run of the
# step-graph review folds (3a5e500) and of draft passes as graph steps:
#   1. the GPU suite (StepGraph*, GoldenCuda in graph mode, CudaLinear.* over the new kernel) and test_golden;
#   2. the launch sweep (CudaLinear.GemvLaunchSweepBandwidth: T = 1 on the one-row kernel at every split-K,
#      the split-K kernel as the reference) and the kernels' SASS;
#   3. bench --ab gemv-fp8-row (qad layout, BF16 one-row off: main's kernels on one side) and --ab
#      gemv-bf16-row (nvidia, then qad with FP8 on both sides), tg32 d4096 C = 1, three alternating repeats in
#      one process (the whole model on an H200, 24 layers on an H100: LAYERS=0|N);
#   4. draft passes as graph steps (models/forward_step.h draft_step): the speculative-decoding tests on the
#      card (lossless greedy, rollback) and the bench's verify / draft rows (nvidia layout).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden test_runtime, cp
#   build-dev/src/backend/cuda/CMakeFiles/bloomery_backend_cuda.dir/gemv/gemv.cu.o .devcarry/bundle/,
#   tar -c .devcarry/bundle | xz -T2 -6 > .devcarry-all/b.txz; lean-tree.sh on. device run, carry
#   [".devcarry-all"], command: bash scripts/gpu/fp8-row.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
gpu_suite gpu-tests.txt '-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 240
pack
golden_run golden.txt 60
pack
timeout 90 $B/bin/test_gpu --gtest_filter='CudaLinear.GemvLaunchSweepBandwidth' > $out/sweep.txt 2>&1
echo "sweep rc=$?"; grep -E "T=1" $out/sweep.txt | grep -E "heuristic|reference|fastest" | head -40
CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$CUOBJDUMP" ] && [ -f $B/gemv.cu.o ]; then  # the object carried next to the bundle's binaries
  $CUOBJDUMP -sass $B/gemv.cu.o > $out/gemv-sass.txt 2>&1
  for k in gemv_row_k 'gemv_splitILNS0_5WidthE2ELi1ELb0E'; do
    awk -v k="$k" '/Function :/ {on = index($0, k) > 0} on' $out/gemv-sass.txt > $out/sass-$k.txt
    echo "sass $k: $(grep -cE '/\*[0-9a-f]{4}\*/' $out/sass-$k.txt) instructions"
  done
  rm -f $out/gemv-sass.txt
fi
pack
ab() {  # ab NAME LAYOUT KNOB [env…]: tg32 d4096 C = 1, three alternating repeats in one process
  local name=$1 layout=$2 knob=$3
  shift 3
  env "$@" timeout 150 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout \
    "${cut[@]}" -p 0 -n 32 -d 4096 -c 1 -r 3 --ab $knob --json-out $out/$name.json > $out/$name.txt 2>&1
  echo "$name rc=$?"; grep -E "^\| tg" $out/$name.txt
  pack
}
ab ab-qad-fp8 qad gemv-fp8-row BLOOMERY_CUDA_GEMV_BF16_ROW=0  # main's kernels against the FP8 one-row kernel
ab ab-nvidia-bf16 nvidia gemv-bf16-row                        # the nvidia layout has no FP8 product
ab ab-qad-bf16 qad gemv-bf16-row                              # FP8 on both sides: BF16's and the mixed launches
BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout 120 $B/bin/test_runtime --gtest_brief=1 \
  --gtest_filter='*SpecDecode*' > $out/spec-cuda.txt 2>&1
echo "spec cuda rc=$?"; grep -E "FAILED|PASSED|tests ran|Failure" $out/spec-cuda.txt | head
pack
timeout 120 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp "${cut[@]}" -p 0 -n 16 -d 4096 -c 1 -r 2 \
  --spec-rows 2,4 > $out/spec-cost.txt 2>&1
echo "spec cost rc=$?"; grep -E "^\| (tg|verify|draft)|graph" $out/spec-cost.txt | head
pack
find $out -mindepth 1 -not -name all.tgz -delete
