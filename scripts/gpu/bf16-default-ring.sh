#!/usr/bin/env bash
# Device call (about 10 minutes), the checks 427d28d waits for (issues 15 and 12):
#   1. the GPU suite on the build's defaults (886e323's gemv_group pass and 427d28d have not run on a card);
#   2. plain BF16 prompt GEMMs with split rows up to 32: GoldenCuda and the speculative-decoding suite on the
#      card (BLOOMERY_SPEC_BACKEND=cuda, 1,000 tokens) with BLOOMERY_CUDA_GEMM=bf16;
#   3. pp4096 in both modes in one process (bench --ab gemm-bf16, three repeats), nvidia and qad layouts;
#   4. the one-row GEMV's ring variant: tg32 d4096 C=1, process by process, three rounds in alternation,
#      BLOOMERY_CUDA_GEMV_ROW_RING 0 against 1 and 2, qad and nvidia layouts.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_runtime,
#   tar -c .devcarry/bundle | xz -T2 -6 > .devcarry-all/b.txz; lean-tree.sh on. device run, carry
#   [".devcarry-all"], command: bash scripts/gpu/bf16-default-ring.sh
# Step 5 needs tests/fixtures/trained/qwen4_exp-bf16 and reference/trained/corpus/heldout.txt in the lean tree.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
gpu_suite gpu-tests.txt
pack
BLOOMERY_CUDA_GEMM=bf16 timeout 150 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='*GoldenCuda*' \
  > $out/golden-bf16.txt 2>&1
echo "golden bf16 rc=$?"; grep -E "PASSED|FAILED|tests ran" $out/golden-bf16.txt | head -8
BLOOMERY_CUDA_GEMM=bf16 BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout 200 $B/bin/test_runtime \
  --gtest_brief=1 --gtest_filter='*SpecDecode*' > $out/spec-cuda-bf16.txt 2>&1
echo "spec cuda bf16 rc=$?"; grep -E "FAILED|PASSED|tests ran" $out/spec-cuda-bf16.txt | head -20
pack
for layout in nvidia qad; do
  timeout 200 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout "${cut[@]}" \
    -p 4096 --pp-depths 0 -n 0 -r 3 --ab gemm-bf16 --json-out $out/pp-$layout.json > $out/pp-$layout.txt 2>&1
  grep -E "^\| pp" $out/pp-$layout.txt | sed "s/^/$layout: /"
  pack
done
for layout in qad nvidia; do
  for r in 1 2 3; do
    for ring in 0 1 2; do
      BLOOMERY_CUDA_GEMV_ROW_RING=$ring timeout 120 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp \
        --synthetic-layout $layout "${cut[@]}" -p 0 -n 32 -d 4096 -c 1 -r 2 \
        --json-out $out/tg-$layout-ring$ring-$r.json > $out/tg-$layout-ring$ring-$r.txt 2>&1
      grep -E "^\| tg" $out/tg-$layout-ring$ring-$r.txt | sed "s/^/$layout ring $ring round $r: /"
    done
  done | tee $out/ab-ring-$layout.txt
  pack
done
# 5. MTP end to end on the trained qwen4_exp (issue 13): draft-off against K = 1, 2, 3, three rounds in
#    alternation, greedy; the generated text must be identical across K.
prompt=$(dd if=reference/trained/corpus/heldout.txt bs=1 skip=2600 count=400 2>/dev/null)
for r in 1 2 3; do
  for k in 0 1 2 3; do
    spec=(); [ $k -gt 0 ] && spec=(--spec-type draft-mtp --spec-draft-n-max $k)
    timeout 60 $B/bin/bloomery run -m tests/fixtures/trained/qwen4_exp-bf16 --backend cuda -p "$prompt" -n 200 \
      --temp 0 --ignore-eos "${spec[@]}" > $out/mtp-k$k-$r.out 2> $out/mtp-k$k-$r.err
    echo "mtp K=$k round $r: $(grep -E 'tokens/s' $out/mtp-k$k-$r.err) $(grep -E '^drafts' $out/mtp-k$k-$r.err)"
  done
done | tee $out/mtp-trained.txt
md5sum $out/mtp-k*.out | awk '{print $1}' | sort | uniq -c | sed 's/^/mtp text variants: /'
pack
find $out -mindepth 1 -not -name all.tgz -delete
