#!/usr/bin/env bash
# Device call (about 8 minutes) for issue 15 item 5: plain BF16 activations in the prompt GEMMs (dense,
# cuBLASLt and the grouped MoE; BLOOMERY_CUDA_GEMM=bf16) against the split-BF16 default (bf16x2):
#   1. the accuracy gate (GoldenCuda: teacher-forced KL and top-1 bands calibrated on transformers' BF16
#      noise, greedy up to the first near-tie) in both modes, with the engine's numbers printed;
#   2. pp4096 TTFT, process by process, three rounds in alternation, nvidia and qad layouts (the whole model
#      on an H200, 24 layers on an H100: LAYERS=0|N overrides).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu,
#   tar -c .devcarry/bundle | xz -T2 -6 > .devcarry-all/b.txz; lean-tree.sh on. device run, carry
#   [".devcarry-all"], command: bash scripts/gpu/bf16-act.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
for mode in bf16 bf16x2; do
  BLOOMERY_CUDA_GEMM=$mode timeout 150 $B/bin/test_gpu --gtest_filter='GoldenCuda*' > $out/golden-$mode.txt 2>&1
  echo "golden $mode rc=$?"; grep -E "PASSED|FAILED|tests ran" $out/golden-$mode.txt | head -8
  pack
done
for layout in nvidia qad; do
  for r in 1 2 3; do
    for mode in bf16x2 bf16; do
      BLOOMERY_CUDA_GEMM=$mode timeout 100 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp \
        --synthetic-layout $layout "${cut[@]}" -p 4096 --pp-depths 0 -n 0 -r 2 \
        --json-out $out/pp-$layout-$mode-$r.json > $out/pp-$layout-$mode-$r.txt 2>&1
      grep -E "^\| pp" $out/pp-$layout-$mode-$r.txt | sed "s/^/$layout $mode round $r: /"
    done
  done | tee $out/ab-rounds-$layout.txt
  pack
done
find $out -mindepth 1 -not -name all.tgz -delete
