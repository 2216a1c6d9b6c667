#!/usr/bin/env bash
# Device call (about 8 minutes): where a decode step's card time goes in graph mode, kernel by kernel, for
# issue 12 (C = 1 and 4, nvidia and qad layouts) and issue 13 (the plain step next to a verify's cost).
# Nsight Compute times every kernel node of the graph replays (--graph-profiling node: each node serialised,
# at the card's own clocks) inside the bench's --profile-tg range only (no prompt, no warm-up): duration and
# DRAM bytes per kernel, summed per name here by scripts/gpu/ncu-sum.py. The sum against the bench's step
# time is what launch gaps and dependencies cost.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery, tar -cJf .devcarry-all/b.txz
#   .devcarry/bundle; lean-tree.sh on. device run, carry [".devcarry-all"], command: bash scripts/gpu/step-profile.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
[ -z "$NCU" ] && exit 1
profile() {  # name, bench args…
  local name=$1
  shift
  # ~70 s to the end of the tg range; the bench then takes ncu past 150 s to shut down (the CSV is complete by then)
  timeout 150 $NCU --profile-from-start off --graph-profiling node --clock-control none --csv --print-units base \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__registers_per_thread \
    $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 2 -d 4096 -r 1 --profile-tg "$@" \
    > $out/$name.csv 2> $out/$name-run.txt
  echo "$name ncu rc=$?"; tail -2 $out/$name-run.txt; wc -l < $out/$name.csv
  python3 scripts/gpu/ncu-sum.py $out/$name.csv 2 > $out/$name-sum.txt 2>&1; head -30 $out/$name-sum.txt
  pack
}
profile nvidia-c1 -c 1
profile nvidia-c4 -c 4
profile qad-c1 -c 1 --synthetic-layout qad
timeout 120 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 16 -d 4096 -c 1 -r 2 \
  --spec-rows 2,4 > $out/spec-cost.txt 2>&1
echo "spec rc=$?"; grep -E "^\| (tg|verify|draft)" $out/spec-cost.txt
pack
find $out -mindepth 1 -not -name all.tgz -delete
