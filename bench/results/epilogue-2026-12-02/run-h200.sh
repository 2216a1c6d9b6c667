#!/usr/bin/env bash
# Session-6 device call 2: fused product epilogues (scale / activation / scale in the GEMV store) — correctness,
# A/B against the separate ops; C = 1 host/card split; the FP4-Local (qad) layout; per-op times.
set -uo pipefail
source scripts/gpu/bundle-env.sh
gpu_suite gpu-tests.txt
timeout 200 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4,16 -r 3 \
  --ab epilogue --json-out $out/ab-epilogue.json > $out/ab-epilogue.txt 2>&1
echo "ab rc=$?"; grep -E "tg|roofline|bandwidth|CUDA graphs" $out/ab-epilogue.txt | head -30
# C = 1 alone: the graph statistics of C = 1 steps only (host recording against the card)
timeout 60 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 64 -d 4096 -c 1 -r 3 \
  --json-out $out/c1.json > $out/c1.txt 2>&1
echo "c1 rc=$?"; grep -E "tg|CUDA graphs" $out/c1.txt | head -6
timeout 90 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout qad -p 0 -n 32 -d 4096 \
  -c 1,16 -r 2 --json-out $out/qad.json > $out/qad.txt 2>&1
echo "qad rc=$?"; grep -E "tg|roofline" $out/qad.txt | head -6
BLOOMERY_CUDA_OP_TIMES=1 timeout 75 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 8 -d 4096 \
  -c 1 -r 1 --cuda-graphs off > $out/optimes.txt 2>&1
echo "op times rc=$?"; grep -A40 "per-op" $out/optimes.txt | head -42
