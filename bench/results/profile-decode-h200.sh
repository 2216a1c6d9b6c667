#!/usr/bin/env bash
# Where a decode step's time goes on full-size synthetic Qwen3.8-Flash-Next at depth 4096:
#   1. CUDA graph mode's phases per replayed step (record on the host, update, instantiate, replay) at C=1, 16;
#   2. an Nsight Systems kernel summary of the eager tg steps (bench --profile-tg), when nsys is installed.
# Build: BUILD_DIR=build BUNDLE=.devcarry/bundle scripts/device-bundle.sh bloomery
# Device call: carry [".devcarry/bundle"], command: bash bench/results/profile-decode-h200.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
B=${BUNDLE:-.devcarry/bundle}
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
bench=(timeout 200 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -d 4096)
for c in ${GRAPH_CS:-1 16}; do
  "${bench[@]}" -n 32 -c $c -r 2 --cuda-graphs on --json-out "$out/graphs-phases-c$c.json" > "$out/graphs-c$c.txt" 2>&1
  echo "graphs c=$c rc=$?"; grep -E "^\| tg|CUDA graphs" "$out/graphs-c$c.txt"
done
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
[ -z "$nsys" ] && { echo "no nsys on this machine"; exit 0; }
for c in ${PROFILE_CS:-1 16}; do
  timeout 240 "$nsys" profile --capture-range=cudaProfilerApi --trace=cuda -o "$out/decode-c$c" --force-overwrite true \
    "${bench[@]}" -n 8 -c $c -r 1 --profile-tg --cuda-graphs off > "$out/nsys-c$c.txt" 2>&1
  echo "nsys c=$c rc=$?"
  "$nsys" stats --report cuda_gpu_kern_sum --format csv -o "$out/kern-c$c" "$out/decode-c$c.nsys-rep" > /dev/null 2>&1
  head -25 "$out/kern-c${c}_cuda_gpu_kern_sum.csv" | cut -c1-220
  rm -f "$out/decode-c$c.sqlite" "$out/decode-c$c.nsys-rep"
done
