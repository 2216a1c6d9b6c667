#!/usr/bin/env bash
# One device call of at most BUDGET seconds (default 500; a step that could end past it is skipped), issue 13
# on the card, the most needed first, packing after every step:
#   1. the MTP acceptance test on the trained FP4-Local qwen4_exp (MtpAcceptance: the reference statistic and
#      the scheduler's measured acceptance) and the draft catch-up tests (deferred decode rows, the one head
#      row of a proposal, one pass for several slots) with BLOOMERY_SPEC_BACKEND=cuda;
#   2. bench's slot rows (drafting off and on through the scheduler, alternating) on the trained model with
#      held-out text prompts: K = 1 and 3 at C = 1 and 16 (issue 13's 1.5× at C = 1; never slower at C = 16);
#   3. the same on the full-size synthetic qwen4_exp (random weights: drafts rejected, so the rows measure what
#      drafting costs when it does not pay), with the verify/draft rows, at C = 1 and 16.
# Carry: .devcarry-all (bundle of bloomery, test_gpu, test_runtime, test_golden) with the lean tree on
# (scripts/gpu/lean-tree.sh keeps the FP4-Local trained qwen4_exp). Command: bash scripts/gpu/spec-slots.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
start_budget 500

BLOOMERY_SPEC_BACKEND=cuda timeout 120 $B/bin/test_runtime --gtest_brief=1 \
  --gtest_filter='*MtpAcceptance*:*CatchUp*:*Deferred*:*PlainRows*' > $out/spec-tests.txt 2>&1
echo "spec tests rc=$? at $((SECONDS - start)) s"
grep -E "FAILED|PASSED|tests ran|acceptance at|scheduler at" $out/spec-tests.txt | head -30
pack

trained=tests/fixtures/trained/qwen4_exp-fp4local-csf
for k in 1 3; do
  fits 60 "trained K=$k" || continue
  timeout 60 $B/bin/bloomery bench --backend cuda -m $trained -p 0 -n 128 -d 64 -c 1,16 -r 3 \
    --spec-type draft-mtp --spec-draft-n-max $k --spec-text reference/trained/corpus/heldout.txt \
    --json-out $out/trained-k$k.json > $out/trained-k$k.txt 2>&1
  echo "trained K=$k rc=$? at $((SECONDS - start)) s"; grep -E "^\| tg" $out/trained-k$k.txt
  pack
done

for layout in nvidia qad; do
  fits 200 "synthetic $layout" || continue
  timeout 200 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout "${cut[@]}" \
    -p 0 -n 32 -d 1024 -c 1,16 -r 3 --spec-rows 2,4 --spec-type draft-mtp --spec-draft-n-max 3 \
    --json-out $out/synthetic-$layout.json > $out/synthetic-$layout.txt 2>&1
  echo "synthetic $layout rc=$? at $((SECONDS - start)) s"; grep -E "^\| (tg|verify|draft)" $out/synthetic-$layout.txt
  pack
done
find $out -mindepth 1 -not -name all.tgz -delete
