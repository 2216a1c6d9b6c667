#!/usr/bin/env bash
# Session-5 device call: GEMV v2 correctness + A/B, per-op times, glm5_next on the card.
set -uo pipefail
out=${OUT:-/tmp}
tar -xzf .devcarry-all/b.tgz
B=.devcarry/bundle
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}" BLOOMERY_SOURCE_DIR="$PWD"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
# 1. correctness of the new GEMV (default variant 2) and the folded unit decoders
timeout 120 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='*Linear*:*Gemv*:*Moe*:*Dequant*:*GoldenCuda*qwen*' > $out/gpu-tests-v2.txt 2>&1
echo "gpu tests (gemv v2) rc=$?"; grep -E "FAILED|PASSED|tests ran" $out/gpu-tests-v2.txt | head -30
# 2. A/B: main GEMV (1) vs candidate (2), alternating repeat by repeat, three rounds, graphs on
timeout 170 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4,16 -r 3 --ab gemv \
  --json-out $out/ab-gemv.json > $out/ab-gemv.txt 2>&1
echo "ab rc=$?"; grep -E "tg|roofline|bandwidth" $out/ab-gemv.txt | head -30
# 3. per-op device times, eager, one process per variant
for v in 1 2; do
  BLOOMERY_CUDA_GEMV=$v BLOOMERY_CUDA_OP_TIMES=1 timeout 75 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp \
    -p 0 -n 8 -d 4096 -c 1 -r 1 --cuda-graphs off > $out/optimes-v$v.txt 2>&1
  echo "op times v$v rc=$?"; grep -A28 "per-op" $out/optimes-v$v.txt | head -30
done
# 4. glm5_next ops and goldens on the card (glm-cuda branch bundle)
BUNDLE=.devcarry-glm/bundle timeout 100 bash .devcarry-all/glm.sh 2>&1 | head -60
