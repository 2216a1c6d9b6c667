#!/usr/bin/env bash
# One device call (about 7 minutes) for the fused block ops (split_cols, hc_inject_norm, row-scaled
# accumulating products; issue 12) at the new defaults (grouped GEMV products and cuBLASLt prompt products on):
#   1. the GPU suite (BlockOps.* among it) and GoldenCuda, then GoldenCuda with the block ops off;
#   2. tensor parallel on the card for a qwen4_exp folder whose shapes divide (TP 2 over the loopback and the
#      host path give TP 1's ids);
#   3. bench --ab block-ops: qwen4_exp nvidia at C = 1 and 4, qwen3_next at C = 1 (keep only if every round
#      wins);
#   4. where decode stands: the per-op profile of a C = 1 step, and the full-size bench with the MTP verify
#      rows.
# Build and carry (the working tree and the carry together must stay under 64 MiB, hence xz):
#   scripts/device-bundle.sh && mkdir -p .devcarry-all &&
#   tar -cJf .devcarry-all/b.txz --exclude=.devcarry/bundle/bin/bloomery-serve .devcarry/bundle
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/block-ops.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
gpu_suite gpu-tests.txt '' 240
golden_run golden.txt 60
BLOOMERY_CUDA_BLOCK_OPS=0 golden_run golden-block-ops-off.txt 60
pack
for f in qwen4_exp-bf16 glm5_next-bf16; do
  m=tests/fixtures/models/$f
  one=$(timeout 60 $B/bin/bloomery run -m $m --backend cuda --prompt-ids 3,17,42,99,7 -n 24 --print-ids --no-progress 2>&1 | grep '^ids:')
  for c in loopback host; do
    two=$(BLOOMERY_TP_COLLECTIVE=$c timeout 60 $B/bin/bloomery run -m $m --backend cuda --tp 2 --prompt-ids 3,17,42,99,7 -n 24 --print-ids 2>$out/tp-$f-$c.log | grep '^ids:')
    [ -n "$one" ] && [ "$one" = "$two" ] && echo "tp2 $c $f: same ids" || echo "tp2 $c $f: DIFFER tp1 [$one] tp2 [$two]"
  done
done | tee $out/tp-run.txt
pack
timeout 120 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4 -r 3 \
  --ab block-ops --json-out $out/ab-block-ops.json > $out/ab-block-ops.txt 2>&1
echo "ab block-ops qwen4_exp rc=$?"; grep -E "^\| tg|graphs \(" $out/ab-block-ops.txt
timeout 90 $B/bin/bloomery bench --backend cuda --synthetic qwen3_next -p 0 -n 32 -d 4096 -c 1 -r 3 \
  --ab block-ops --json-out $out/ab-block-ops-qwen3_next.json > $out/ab-block-ops-qwen3_next.txt 2>&1
echo "ab block-ops qwen3_next rc=$?"; grep -E "^\| tg" $out/ab-block-ops-qwen3_next.txt
pack
BLOOMERY_CUDA_OP_TIMES=1 timeout 90 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 8 -d 4096 \
  -c 1 -r 1 --cuda-graphs off > $out/optimes.txt 2>&1
echo "optimes rc=$?"
pack
timeout 150 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 4096 --pp-depths 0 --pp-concurrent 1 \
  -n 32 -d 4096 -c 1,16 -r 2 --spec-rows 2,4 --json-out $out/stand.json > $out/stand.txt 2>&1
echo "bench rc=$?"; grep -E "^\| |graphs \(" $out/stand.txt
pack
find $out -mindepth 1 -not -name all.tgz -delete
