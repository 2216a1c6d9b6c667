#!/usr/bin/env bash
# One device call (about 8 minutes) for the latency-bound small kernels of a decode step (issue 12): norms of
# wide groups on 1,024 threads (the fused stream write + norm too), the router's top-k by rank in one pass,
# the decode conv and its state update in one launch.
#   1. the GPU suite and GoldenCuda on the change;
#   2. A/B against main's binary (carried as .devcarry-all/main.txz, bloomery of the commit before), main and
#      change alternating process by process, three rounds: qwen4_exp nvidia tg32 d4096 at C = 1 and 4,
#      qwen3_next at C = 1;
#   3. the eager per-op profile of the change at C = 1.
# Build and carry:
#   (main) cp .devcarry/bundle/bin/bloomery /tmp/main-bin/ before rebuilding; tar -C /tmp -cJf
#   .devcarry-all/main.txz main-bin; (change) scripts/device-bundle.sh && tar -cJf .devcarry-all/b.txz
#   --exclude=.devcarry/bundle/bin/bloomery-serve .devcarry/bundle; the trained folders left out of the tree
#   for the call (git sparse-checkout) so that the tree and the carry stay under 64 MiB.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/small-kernels.sh [ab]
#   ab: only step 2 (the suite already ran on a superset of the change).
set -uo pipefail
part=${1:-all}
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
tar -C /tmp -xJf .devcarry-all/main.txz
if [ "$part" != ab ]; then
  gpu_suite gpu-tests.txt '' 240
  timeout 60 $B/bin/test_golden --gtest_brief=1 > $out/golden.txt 2>&1
  echo "golden rc=$?"; grep -E "PASSED|FAILED" $out/golden.txt | head -3
  pack
fi
for r in 1 2 3; do
  for v in main change; do
    bin=$B/bin/bloomery; [ $v = main ] && bin=/tmp/main-bin/bloomery
    timeout 80 $bin bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4 -r 1 \
      --json-out $out/qwen4_exp-$v-$r.json > $out/qwen4_exp-$v-$r.txt 2>&1
    grep -E "^\| tg" $out/qwen4_exp-$v-$r.txt | sed "s/^/qwen4_exp $v round $r: /"
  done
done | tee $out/ab-qwen4_exp.txt
pack
for r in 1 2 3; do
  for v in main change; do
    bin=$B/bin/bloomery; [ $v = main ] && bin=/tmp/main-bin/bloomery
    timeout 60 $bin bench --backend cuda --synthetic qwen3_next -p 0 -n 32 -d 4096 -c 1 -r 1 \
      --json-out $out/qwen3_next-$v-$r.json > $out/qwen3_next-$v-$r.txt 2>&1
    grep -E "^\| tg" $out/qwen3_next-$v-$r.txt | sed "s/^/qwen3_next $v round $r: /"
  done
done | tee $out/ab-qwen3_next.txt
pack
[ "$part" = ab ] || BLOOMERY_CUDA_OP_TIMES=1 timeout 90 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 8 -d 4096 \
  -c 1 -r 1 --cuda-graphs off > $out/optimes.txt 2>&1
[ "$part" = ab ] || echo "optimes rc=$?"; [ "$part" = ab ] || sed -n '/per-op/,$p' $out/optimes.txt | head -16
pack
find $out -mindepth 1 -not -name all.tgz -delete
