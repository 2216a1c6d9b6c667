#!/usr/bin/env bash
# (Record: the device script as it ran, from scripts/gpu/ at 771e9cb; the ring knobs it names were removed with the variant.)
# Two device calls of under ten minutes each, on one bundle (issues 12, 13, 15):
#   check:  the GPU suite (BlockOps.GdnStepGatedEqualsSeparateOps among them), then plain BF16 prompt GEMMs with
#           split rows up to 32 (427d28d): GoldenCuda and the speculative-decoding suite on the card
#           (BLOOMERY_SPEC_BACKEND=cuda, 1,000 tokens) with BLOOMERY_CUDA_GEMM=bf16, and pp4096 in both modes in
#           one process (bench --ab gemm-bf16, three repeats), nvidia and qad layouts;
#   decode: tg32 d4096 in one process per A/B, three repeats: the GDN mixer in one pass against the separate
#           ops (--ab gdn-gated, C = 1 and 4), the one-row GEMV's ring variant (--ab row-ring-fp8 on qad,
#           --ab row-ring on nvidia, C = 1); then MTP end to end on the trained qwen4_exp (draft-off against
#           K = 1, 2, 3, three rounds in alternation, greedy; the text must be identical across K).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_runtime,
#   tar -c .devcarry/bundle | xz -T2 -6 > .devcarry-all/b.txz; the lean tree keeps
#   tests/fixtures/trained/qwen4_exp-bf16 and reference/trained/corpus/heldout.txt. device run, carry
#   [".devcarry-all"], command: bash scripts/gpu/gdn-bf16-ring.sh check|decode
# one: a single call when device time is short (the GPU tests the new code needs, the BF16 checks, the
#   decode A/Bs without the nvidia ring, MTP; no pp A/B).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
tg=(-p 0 -n 32 -d 4096 -r 3)
# MTP end to end on the trained qwen4_exp: draft-off against K = 1, 2, 3, three rounds in alternation, greedy.
mtp_trained() {
  local prompt r k spec
  prompt=$(dd if=reference/trained/corpus/heldout.txt bs=1 skip=2600 count=400 2>/dev/null)
  for r in 1 2 3; do
    for k in 0 1 2 3; do
      spec=()
      [ $k -gt 0 ] && spec=(--spec-type draft-mtp --spec-draft-n-max $k)
      timeout 60 $B/bin/bloomery run -m tests/fixtures/trained/qwen4_exp-bf16 --backend cuda -p "$prompt" \
        -n 200 --temp 0 --ignore-eos "${spec[@]}" > $out/mtp-k$k-$r.out 2> $out/mtp-k$k-$r.err
      echo "mtp K=$k round $r: $(grep -E 'tokens/s' $out/mtp-k$k-$r.err) $(grep -E '^drafts' $out/mtp-k$k-$r.err)"
    done
  done | tee $out/mtp-trained.txt
  md5sum $out/mtp-k*.out | awk '{print $1}' | sort | uniq -c | sed 's/^/mtp text variants: /'
  pack
}
# Plain BF16 prompt GEMMs: GoldenCuda and the speculative-decoding suite on the card; $1, $2: time limits.
bf16_checks() {
  BLOOMERY_CUDA_GEMM=bf16 timeout "$1" $B/bin/test_gpu --gtest_brief=1 --gtest_filter='*GoldenCuda*' \
    > $out/golden-bf16.txt 2>&1
  echo "golden bf16 rc=$?"; grep -E "PASSED|FAILED|tests ran" $out/golden-bf16.txt | head -8
  BLOOMERY_CUDA_GEMM=bf16 BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout "$2" $B/bin/test_runtime \
    --gtest_brief=1 --gtest_filter='*SpecDecode*' > $out/spec-cuda-bf16.txt 2>&1
  echo "spec cuda bf16 rc=$?"; grep -E "FAILED|PASSED|tests ran" $out/spec-cuda-bf16.txt | head -20
  pack
}
# The GDN mixer in one pass against the separate ops, qad and nvidia, C = 1 and 4; $1: time limit a run.
gdn_ab() {
  local layout
  for layout in qad nvidia; do
    timeout "$1" $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout \
      "${cut[@]}" "${tg[@]}" -c 1,4 --ab gdn-gated --json-out $out/gdn-$layout.json > $out/gdn-$layout.txt 2>&1
    grep -E "^\| tg" $out/gdn-$layout.txt | sed "s/^/gdn-gated $layout: /"
    pack
  done
}
case "${1:-}" in
  check)
    gpu_suite gpu-tests.txt
    pack
    bf16_checks 150 200
    for layout in nvidia qad; do
      timeout 120 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout \
        "${cut[@]}" -p 4096 --pp-depths 0 -n 0 -r 3 --ab gemm-bf16 --json-out $out/pp-$layout.json \
        > $out/pp-$layout.txt 2>&1
      grep -E "^\| pp" $out/pp-$layout.txt | sed "s/^/$layout: /"
      pack
    done
    ;;
  decode)
    gdn_ab 150
    for ab in qad:row-ring-fp8 nvidia:row-ring; do
      layout=${ab%%:*} knob=${ab#*:}
      timeout 120 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout \
        "${cut[@]}" "${tg[@]}" -c 1 --ab $knob --json-out $out/$knob-$layout.json > $out/$knob-$layout.txt 2>&1
      grep -E "^\| tg" $out/$knob-$layout.txt | sed "s/^/$knob $layout: /"
      pack
    done
    mtp_trained
    ;;
  one)  # one call when device time is short, most needed first: the GPU tests of the new code, the GDN A/B,
    # the plain BF16 checks, MTP, the FP8 ring A/B, qwen3_next's GDN A/B; no pp A/B
    timeout 120 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='*GoldenCuda*:BlockOps.*:CudaOps.GatedDeltaRule' \
      > $out/gpu-tests.txt 2>&1
    echo "gpu tests rc=$?"; grep -E "FAILED|PASSED|tests ran|Failure" $out/gpu-tests.txt | head -20
    pack
    gdn_ab 100
    bf16_checks 100 100
    mtp_trained
    timeout 80 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout qad "${cut[@]}" \
      "${tg[@]}" -c 1 --ab row-ring-fp8 --json-out $out/row-ring-fp8-qad.json > $out/row-ring-fp8-qad.txt 2>&1
    grep -E "^\| tg" $out/row-ring-fp8-qad.txt | sed "s/^/row-ring-fp8 qad: /"
    pack
    timeout 80 $B/bin/bloomery bench --backend cuda --synthetic qwen3_next "${cut[@]}" "${tg[@]}" -c 1 \
      --ab gdn-gated --json-out $out/gdn-qwen3_next.json > $out/gdn-qwen3_next.txt 2>&1
    grep -E "^\| tg" $out/gdn-qwen3_next.txt | sed "s/^/gdn-gated qwen3_next: /"
    pack
    ;;
  *)
    echo "usage: $0 check|decode|one" >&2
    exit 2
    ;;
esac
find $out -mindepth 1 -not -name all.tgz -delete
