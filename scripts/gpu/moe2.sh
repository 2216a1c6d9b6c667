#!/usr/bin/env bash
# Routed-expert decode variant 2 (issue 12): correctness of both variants, their kernel times side by side,
# the tg A/B, and ncu on the variant-2 kernels, one device call (about 8 minutes). Build the bundle first:
#   BUILD_DIR=build-moe2 scripts/device-bundle.sh bloomery test_gpu && mkdir -p .devcarry-all &&
#   tar -czf .devcarry-all/b.tgz .devcarry/bundle
# then: device run, carry [".devcarry-all"], command: bash scripts/gpu/moe2.sh
# Logs to $OUT: moe-tests.txt, gpu-tests.txt, moe-bench.txt, ab-moe.{txt,json}, ncu-moe2.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
# 1. The tests this change touches (both variants, every format; GEMV / GEMM share the unit decoders), then
# the whole GPU suite without its timing tests.
gpu_suite moe-tests.txt 'CudaMoe.*:CudaLinear.*:GemmTc.*:GpuDequant.*:GroupedGemm.*-*Bandwidth*' 120
gpu_suite gpu-tests.txt
# 2. Variant 1 | 2 kernel times and per-layer decode times at qwen4_exp's shapes.
timeout 120 $B/bin/test_gpu --gtest_filter='CudaMoe.DecodeBandwidth' > $out/moe-bench.txt 2>&1
echo "moe bench rc=$?"; grep "moe-bench" $out/moe-bench.txt | grep -E "kernels|decode" | head -40
# 3. A/B in the server's decode steps: variant 1 (rows tgN) against 2 (tgN+moe2), repeat by repeat, graphs on.
timeout 200 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,4,16 -r 3 \
  --ab moe --json-out $out/ab-moe.json > $out/ab-moe.txt 2>&1
echo "ab rc=$?"; grep -E "tg|roofline|bandwidth" $out/ab-moe.txt | head -20
# 4. ncu on the NVFP4 variant-2 kernels at T = 1 (their first launches in the bandwidth test).
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 90 "$NCU" --clock-control none -k 'regex:gate_up_v2|down_v2' -c 2 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section SchedulerStats $B/bin/test_gpu --gtest_filter='CudaMoe.DecodeBandwidth' > $out/ncu-moe2.txt 2>&1
  echo "ncu rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Block Limit|Warp Cycles Per Issued|Issued Ipc|Waves" $out/ncu-moe2.txt | head -40
fi
