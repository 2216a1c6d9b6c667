#!/usr/bin/env bash
# Device call: issue 12's target rows at this tree's defaults, for docs/performance.md's "Where it stands":
# full-size synthetic qwen4_exp, tg32 at depth 4096, the nvidia layout at C = 1, 4 and 16 and the qad (FP4-Local)
# layout at C = 1 and 4 with its pp4096.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery, tar -cJf .devcarry-all/b.txz
#   .devcarry/bundle; lean-tree.sh on. device run, carry [".devcarry-all"], command: bash scripts/gpu/where-it-stands.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
q=(bench --backend cuda --synthetic qwen4_exp -n 32 -d 4096)
timeout 200 $B/bin/bloomery "${q[@]}" -p 0 -c 1,4,16 -r 2 --json-out $out/nvidia.json > $out/nvidia.txt 2>&1
echo "nvidia rc=$?"; grep -E "^\| (tg|pp)|copy bandwidth" $out/nvidia.txt
pack
timeout 200 $B/bin/bloomery "${q[@]}" --synthetic-layout qad -p 4096 --pp-depths 0 -c 1,4 -r 2 \
  --json-out $out/qad.json > $out/qad.txt 2>&1
echo "qad rc=$?"; grep -E "^\| (tg|pp)" $out/qad.txt
pack
find $out -mindepth 1 -not -name all.tgz -delete
