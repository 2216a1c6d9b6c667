#!/usr/bin/env bash
# Device call: the stream-ordered pool's release threshold (a BLOOMERY_CUDA_POOL_KEEP_MB switch in
# cuda_backend.cc, measured on 2026-12-04 and dropped: docs/performance.md; without it step 2 runs the same
# code twice) and the final checks of that tree. 1. GoldenCuda, CudaLinear and BlockOps at the tree's defaults (the tensor-core
# GEMV on); 2. pp4096 with the pool released at every synchronisation (KEEP_MB=0, main's behaviour) against the
# default, process by process, three rounds; 3. pp4096 at depth 32,768 (issue 15's depth row); 4. qwen3_next's
# decode with the tensor-core GEMV off and on (--ab gemv-tc, three rounds).
# Build and carry: as scripts/gpu/flash-attn.sh. device run, carry [".devcarry-all"],
#   command: bash scripts/gpu/pool-keep.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
timeout 150 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='*GoldenCuda*:CudaLinear.*:BlockOps.*:CudaOps.*Attention*-*Bandwidth*:*Timings*' \
  > $out/checks.txt 2>&1
echo "GoldenCuda+CudaLinear+BlockOps rc=$?"; grep -E "PASSED|FAILED|SKIPPED|tests ran" $out/checks.txt | head -8
pack
pp=(bench --backend cuda --synthetic qwen4_exp -p 4096 --pp-depths 0 -n 0 -c 1 -r 2)
for r in 1 2 3; do
  for keep in 0 2048; do
    BLOOMERY_CUDA_POOL_KEEP_MB=$keep timeout 100 $B/bin/bloomery "${pp[@]}" --json-out $out/keep$keep-$r.json \
      > $out/keep$keep-$r.txt 2>&1
    grep -E "^\| pp" $out/keep$keep-$r.txt | sed "s/^/keep $keep MB round $r: /"
  done
done | tee $out/ab-pool.txt
pack
timeout 150 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 4096 --pp-depths 0,32768 -n 0 -c 1 -r 1 \
  --json-out $out/pp-depth.json > $out/pp-depth.txt 2>&1
echo "pp at depth rc=$?"; grep -E "^\| pp" $out/pp-depth.txt
pack
timeout 150 $B/bin/bloomery bench --backend cuda --synthetic qwen3_next -p 0 -n 32 -d 4096 -c 1,4 -r 3 --ab gemv-tc \
  --json-out $out/qwen3-ab.json > $out/qwen3-ab.txt 2>&1
echo "qwen3_next ab rc=$?"; grep -E "^\| tg" $out/qwen3-ab.txt
pack
find $out -mindepth 1 -not -name all.tgz -delete
