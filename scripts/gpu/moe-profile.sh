#!/usr/bin/env bash
# One device call (about 3 minutes): Nsight Compute's full set on the routed-expert decode kernels at
# qwen4_exp's size (E 512, D 2560, I 640, k 10, T = 1; CudaMoe.DecodeBandwidth), NVFP4 and BF16 side by side,
# to see what bounds them before a kernel is rewritten (issue 12). The test launches gate_up_v2 and down_v2
# 164 times per (format, T): 41 + 41 through moe_experts, 41 + 41 alone; BF16 is the fourth format.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/moe-profile.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
NCU=/usr/local/cuda/bin/ncu
for run in "nvfp4 0" "bf16 1968"; do
  set -- $run
  timeout 150 $NCU --set full -k 'regex:gate_up_v2|down_v2' --launch-skip $2 --launch-count 2 --csv \
    --page details $B/bin/test_gpu --gtest_filter='CudaMoe.DecodeBandwidth' > $out/ncu-moe-$1.csv \
    2> $out/ncu-moe-$1.err
  echo "ncu $1 rc=$?"; grep -c '"ID"' $out/ncu-moe-$1.csv; tail -2 $out/ncu-moe-$1.err
  pack
done
find $out -mindepth 1 -not -name all.tgz -delete
