#!/usr/bin/env bash
# One device call (about 8 minutes) for the FP8 unit decode without a per-element NaN select (issue 12;
# weight_access.cuh: e4m3_word_finite + one NaN probe a unit, bit-identical, so no switch):
#   1. the bit-exactness and stored-format tests (every E4M3 byte, NaN codes included, against the reference
#      decoder; GEMVs of every format at the model's shapes against the CPU);
#   2. main's binary against the change, process by process, three rounds: qwen4_exp tg32 d4096 C = 1 in the
#      nvidia layout (FP8 block projections) and the qad one (FP4-Local: MXFP8 projections);
#   3. the isolated GEMV bandwidths of the change, and Nsight Compute on them (one launch per launch
#      configuration: speed of light, pipe use, warp stalls, occupancy), so the next kernel starts from a
#      profile.
# Build and carry: cp .devcarry/bundle/bin/bloomery (main's build) to /tmp/main-bin/ and tar -C /tmp -cJf
#   .devcarry-all/main.txz main-bin; then scripts/device-bundle.sh && tar -cJf .devcarry-all/b.txz
#   --exclude=.devcarry/bundle/bin/bloomery-serve .devcarry/bundle; lean-tree.sh on.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/fp8-decode.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
tar -C /tmp -xJf .devcarry-all/main.txz
timeout 60 $B/bin/test_gpu --gtest_brief=1 \
  --gtest_filter='CudaMoe.FastUnitDecodeIsBitExact:CudaLinear.StoredFormatsAtModelShapes:CudaLinear.Grouped*' \
  > $out/tests.txt 2>&1
echo "tests rc=$?"; grep -E "FAILED|PASSED|Failure" $out/tests.txt | head -10
pack
for r in 1 2 3; do
  for layout in nvidia qad; do
    for v in main change; do
      run=($B/bin/bloomery); [ $v = main ] && run=(/tmp/main-bin/bloomery)
      timeout 50 "${run[@]}" bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout -p 0 -n 32 -d 4096 -c 1 \
        -r 1 --json-out $out/$layout-$v-$r.json > $out/$layout-$v-$r.txt 2>&1
      grep -E "^\| tg" $out/$layout-$v-$r.txt | sed "s/^/$layout $v round $r: /"
    done
  done
done | tee $out/ab.txt
pack
timeout 40 $B/bin/test_gpu --gtest_filter='CudaLinear.GemvBandwidth' > $out/bandwidth.txt 2>&1
echo "bandwidth rc=$?"; grep -E "GB/s" $out/bandwidth.txt | head -40
pack
ncu=(/usr/local/cuda/bin/ncu --clock-control none -k regex:gemv --launch-skip 3 --launch-count 1
  --filter-mode per-launch-config --csv)
timeout 80 "${ncu[@]}" --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --section LaunchStats --page details $B/bin/test_gpu \
  --gtest_filter='CudaLinear.GemvBandwidth' > $out/ncu-sections.csv 2> $out/ncu-sections.err
echo "ncu sections rc=$?"; wc -l < $out/ncu-sections.csv
pack
timeout 60 "${ncu[@]}" --metrics 'regex:^sm__inst_executed_pipe_[a-z0-9_]+\.avg\.pct_of_peak_sustained_active$' \
  --page raw $B/bin/test_gpu --gtest_filter='CudaLinear.GemvBandwidth' > $out/ncu-pipes.csv 2> $out/ncu-pipes.err
echo "ncu pipes rc=$?"; wc -l < $out/ncu-pipes.csv
pack
find $out -mindepth 1 -not -name all.tgz -delete
