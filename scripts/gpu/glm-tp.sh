#!/usr/bin/env bash
# Device call for issue 16's one-GPU numbers: glm5_next at full per-layer shapes cut to 8 layers (3 dense, 5
# sparse, 2 DSA, + NextN), decode and prefill on one H200, TP 1 against TP 2 over the one-GPU loopback (two CUDA
# ranks in one process; bench --synthetic builds each rank's slices), graphs on (TP 1's default) and off (steps
# with collectives run eager). A 4-layer TP 2 smoke run first.
# Build and carry: as scripts/gpu/flash-attn.sh. device run, carry [".devcarry-all"],
#   command: bash scripts/gpu/glm-tp.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
mkdir -p "$out"
g=(bench --backend cuda --synthetic glm5_next)
timeout 90 $B/bin/bloomery "${g[@]}" --layers 4 -p 64 -n 8 -c 1 -r 1 --tp 2 > $out/glm-smoke.txt 2>&1
echo "glm tp2 smoke rc=$?"; grep -E "^\| (pp|tg)|NON-FINITE|error|E_" $out/glm-smoke.txt | head
pack
for tp in 1 2; do
  timeout 150 $B/bin/bloomery "${g[@]}" --layers 8 -p 512 -n 32 -c 1 -r 3 --tp $tp --json-out $out/glm-tp$tp.json \
    > $out/glm-tp$tp.txt 2>&1
  echo "glm tp$tp rc=$?"; grep -E "^\| (pp|tg)|decode bytes|NON-FINITE" $out/glm-tp$tp.txt
  pack
done
timeout 120 $B/bin/bloomery "${g[@]}" --layers 8 -p 0 -n 32 -c 1 -r 3 --tp 1 --cuda-graphs off \
  > $out/glm-tp1-eager.txt 2>&1
echo "glm tp1 eager rc=$?"; grep -E "^\| tg" $out/glm-tp1-eager.txt
pack
find $out -mindepth 1 -not -name all.tgz -delete
