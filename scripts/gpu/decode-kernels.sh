# Two device calls (about 8 minutes each) for five decode-kernel changes of issue 12 and a per-kernel profile.
# Part a (all five changes in the bundle):
#   1. the tests the changes touch (unit decoders, GEMV, routed experts, router, attention) and GoldenCuda;
#   2. --ab router (a warp per token against a block), --ab gemv-ahead (four 16-byte units loaded ahead per
#      lane against two), --ab attention (a block per KV head against one per query head) and --ab gemv-short
#      (8 or 16 lanes a short row against 32), each in one process, three repeats alternating, qwen4_exp
#      nvidia tg32 d4096 at C = 1 and 4. (Part a ran at the commit that records its results; only the router
#      won, so the other three were removed and their --ab keys with them: part a no longer runs as is.)
# Part b (the two changes kept: the router's warp per token and the FP4 pair decode):
#   3. the FP4 pair decode (no switch: the weights decode to the same bits), main's binary against the change
#      with the router switched back to a block per token, process by process, three rounds, then the change
#      with its defaults once: qwen4_exp nvidia tg32 d4096 at C = 1;
#   4. GoldenCuda and the GPU suite on the change;
#   5. Nsight Compute's duration of every kernel of two eager C = 1 decode steps at depth 4096 (one pass per
#      kernel, so no replay), inside the bench's --profile-tg range.
# Build and carry: (main) a worktree at main, BUILD_DIR=build-dev BUNDLE=/tmp/mainbundle scripts/device-bundle.sh
#   bloomery, cp the binary to /tmp/main-bin/; tar -C /tmp -cJf .devcarry-all/main.txz main-bin; (change)
#   scripts/device-bundle.sh && tar -cJf .devcarry-all/b.txz --exclude=.devcarry/bundle/bin/bloomery-serve
#   .devcarry/bundle; lean-tree.sh on.
# Part c (the router's warp per token alone: part b's FP4 pair decode lost every round and was removed):
#   6. main's binary against the change, process by process, three rounds, qwen4_exp nvidia tg32 d4096 at
#      C = 1 and 4; GoldenCuda and the GPU suite on the change.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/decode-kernels.sh a|b|c
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
part=${1:-a}
bench=(bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096)
if [ "$part" = a ]; then
timeout 130 $B/bin/test_gpu --gtest_brief=1 \
  --gtest_filter='CudaMoe.*:CudaLinear.*:CudaOps.Router*:CudaOps.Attention*:-*Bandwidth*:*Timing*' > $out/tests.txt 2>&1
echo "tests rc=$?"; grep -E "FAILED|PASSED|tests ran|Failure" $out/tests.txt | head -20
golden_run golden.txt 70
pack
for knob in router; do  # gemv-ahead, attention and gemv-short: see the header
  timeout 85 $B/bin/bloomery "${bench[@]}" -c 1,4 -r 3 --ab $knob --json-out $out/ab-$knob.json \
    > $out/ab-$knob.txt 2>&1
  echo "ab $knob rc=$?"; grep -E "^\| tg" $out/ab-$knob.txt
  pack
done
elif [ "$part" = c ]; then
ab_processes ab-main-change.txt 70 "${bench[@]}" -c 1,4 -r 1
pack
golden_run golden.txt 70
gpu_suite gpu-tests.txt '' 200
pack
else
tar -C /tmp -xJf .devcarry-all/main.txz
# The change with the router switched back is main plus the FP4 decode alone.
off=(env BLOOMERY_CUDA_ROUTER_WARP=0)
for r in 1 2 3; do
  for v in main fp4; do
    run=("${off[@]}" $B/bin/bloomery); [ $v = main ] && run=(/tmp/main-bin/bloomery)
    timeout 45 "${run[@]}" "${bench[@]}" -c 1 -r 1 --json-out $out/fp4-$v-$r.json > $out/fp4-$v-$r.txt 2>&1
    grep -E "^\| tg" $out/fp4-$v-$r.txt | sed "s/^/$v round $r: /"
  done
done | tee $out/ab-fp4.txt
timeout 45 $B/bin/bloomery "${bench[@]}" -c 1 -r 1 --json-out $out/defaults.json > $out/defaults.txt 2>&1
grep -E "^\| tg|graphs" $out/defaults.txt | sed "s/^/change with its defaults: /"
pack
golden_run golden.txt 70
gpu_suite gpu-tests.txt '' 200
pack
BLOOMERY_CUDA_GRAPHS=0 timeout 100 /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --csv \
  --metrics gpu__time_duration.sum $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 2 -d 4096 \
  -c 1 -r 1 --profile-tg > $out/ncu-tg.csv 2> $out/ncu-tg.err
echo "ncu rc=$?"; wc -l < $out/ncu-tg.csv
pack
fi
find $out -mindepth 1 -not -name all.tgz -delete
