#!/usr/bin/env bash
# One device call (about 6 minutes) that measures a full-size qwen4_exp decode step before a kernel is
# changed (issue 12): where the card's time goes in graph mode, and how far each decode kernel is from the
# copy bandwidth.
#   1. the bench at C = 1 and 16 (graph mode, the numbers the issue's table reads);
#   2. Nsight Systems over C = 1 graph replays, node by node (--cuda-graph-trace=node): per-kernel time as the
#      graph runs it, launch gaps and PDL overlap included;
#   3. Nsight Compute on one eager step's decode kernels (duration, DRAM bytes, occupancy, registers) at the
#      card's own clocks (--clock-control none);
#   4. the isolated GEMV and routed-expert bandwidth tests.
# Build and carry: scripts/device-bundle.sh && tar -cJf .devcarry-all/b.txz
#   --exclude=.devcarry/bundle/bin/bloomery-serve .devcarry/bundle; lean-tree.sh on.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/profile-graph.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
bench=($B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096)
timeout 90 "${bench[@]}" -c 1,16 -r 1 --json-out $out/bench.json > $out/bench.txt 2>&1
echo "bench rc=$?"; grep -E "^\| tg|copy bandwidth|graph" $out/bench.txt | head -8
pack
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"
if [ -n "$NSYS" ]; then
  timeout 150 $NSYS profile -o /tmp/step -t cuda --cuda-graph-trace=node --force-overwrite true \
    $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 16 -d 4096 -c 1 -r 1 > $out/nsys-run.txt 2>&1
  echo "nsys rc=$?"
  timeout 90 $NSYS stats -r cuda_gpu_kern_sum --format csv -o $out/kern /tmp/step.nsys-rep > $out/nsys-stats.txt 2>&1
  echo "stats rc=$?"; ls $out | grep kern
  head -25 $out/kern*cuda_gpu_kern_sum*.csv 2>/dev/null | cut -c1-220
fi
pack
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
if [ -n "$NCU" ]; then
  # Depth 0, two steps, eager: every decode kernel of a step (the prompt of one token takes the GEMV too).
  BLOOMERY_CUDA_GRAPHS=0 timeout 240 $NCU --clock-control none --csv --metrics \
    gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size,smsp__inst_executed.sum \
    $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 2 -d 0 -c 1 -r 1 --warmup 0 \
    > $out/ncu-step.csv 2> $out/ncu-step.err
  echo "ncu rc=$?"; wc -l $out/ncu-step.csv; tail -3 $out/ncu-step.err
fi
pack
timeout 120 $B/bin/test_gpu --gtest_filter='*GemvBandwidth*:*DecodeBandwidth*' > $out/bandwidth.txt 2>&1
echo "bandwidth rc=$?"; grep -E "GB/s|OK|FAILED" $out/bandwidth.txt | head -40
pack
find $out -mindepth 1 -not -name all.tgz -delete
