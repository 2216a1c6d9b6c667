#!/usr/bin/env bash
# Session-6 device call 1: deferred zero fill — correctness, A/B against a memset per alloc, per-op times;
# ncu on the routed-expert decode kernels (why 511 GB/s); qwen3_next full-size tg if time is left.
set -uo pipefail
source scripts/gpu/bundle-env.sh
# 1. the GPU suite (no timing tests), lazy zero on (default)
gpu_suite gpu-tests.txt
# 2. A/B: memset per alloc (main) vs deferred zero fill, alternating repeat by repeat, three rounds, graphs on
timeout 200 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4,16 -r 3 \
  --ab eager-zero --json-out $out/ab-lazy-zero.json > $out/ab-lazy-zero.txt 2>&1
echo "ab rc=$?"; grep -E "tg|roofline|bandwidth|nodes" $out/ab-lazy-zero.txt | head -30
# 3. ncu on the NVFP4 routed-expert decode kernels at T = 1 (first launches of the bandwidth test)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  timeout 90 "$NCU" --clock-control none -k 'regex:gate_up_k|down_k' -c 2 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section SchedulerStats $B/bin/test_gpu --gtest_filter='CudaMoe.DecodeBandwidth' > $out/ncu-moe.txt 2>&1
  echo "ncu rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Block Limit|Warp Cycles Per Issued|Stall|Issued Ipc|Waves" $out/ncu-moe.txt | head -50
fi
# 4. per-op device times with the deferred fill, eager
BLOOMERY_CUDA_OP_TIMES=1 timeout 75 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 8 -d 4096 \
  -c 1 -r 1 --cuda-graphs off > $out/optimes-lazy.txt 2>&1
echo "op times rc=$?"; grep -A30 "per-op" $out/optimes-lazy.txt | head -32
# 5. qwen3_next full size, C = 1 and 4
timeout 100 $B/bin/bloomery bench --backend cuda --synthetic qwen3_next -p 0 -n 32 -d 4096 -c 1,4 -r 2 \
  --json-out $out/qwen3_next-tg.json > $out/qwen3_next-tg.txt 2>&1
echo "qwen3_next rc=$?"; grep -E "tg|roofline|bandwidth" $out/qwen3_next-tg.txt | head -12
