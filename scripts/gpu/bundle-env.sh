#!/usr/bin/env bash
# Sourced at the start of a device call's script (repo root): unpacks the carried bundle
# (.devcarry-all/b.tgz or b.txz, made by `tar -czf .devcarry-all/b.tgz .devcarry/bundle` after scripts/device-bundle.sh),
# sets B (the bundle folder), out ($OUT), the library path and BLOOMERY_SOURCE_DIR, and prints the GPU's clocks.
out=${OUT:-/tmp}
[ -f .devcarry-all/b.tgz ] && tar -xzf .devcarry-all/b.tgz
[ -f .devcarry-all/b.txz ] && tar -xJf .devcarry-all/b.txz  # xz when the tree leaves less room
B=.devcarry/bundle
# The toolkit's libraries (cuBLASLt) come from the machine's CUDA install, the Debian ones from the bundle.
export LD_LIBRARY_PATH="$PWD/$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" BLOOMERY_SOURCE_DIR="$PWD"
# NCCL (opened at run time by TP over GPUs): the toolkit's, else PyTorch's wheel (nvidia-nccl-cu13).
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH="$nccl_dir:$LD_LIBRARY_PATH"
fi
export NCCL_NVLS_ENABLE=0  # the workplace's rule: no NVLink multicast
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for f in $B/bin/*; do ldd "$f" | grep "not found" | sed "s|^|MISSING for $f: |"; done
# The synthetic qwen4_exp's size for this card: the whole model where it fits (an H200's memory), 24 layers on
# an H100 (LAYERS=0|N overrides). Sets the array `cut` (bench arguments) and prints the choice.
set_model_cut() {
  local mem layers
  mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  layers=${LAYERS:-$([ "${mem:-0}" -gt 100000 ] && echo 0 || echo 24)}
  cut=()
  [ "$layers" != 0 ] && cut=(--layers "$layers")
  echo "layers: ${layers} (0: all)"
}
# The GPU suite without its timing tests; the log to $out/$1 (default gpu-tests.txt), its summary printed.
gpu_suite() {
  local log=$out/${1:-gpu-tests.txt} filter=${2:--*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*}
  timeout "${3:-200}" $B/bin/test_gpu --gtest_brief=1 --gtest_filter="$filter" > "$log" 2>&1
  echo "gpu tests rc=$?"; grep -E "FAILED|PASSED|tests ran|Failure|SKIPPED" "$log" | head -30
}
# $out packed into $out/all.tgz (a call returns at most 8 files): scripts call it after every step, so a call
# cut off returns what ran.
pack() { (cd "$out" && tar czf ../all.tgz --exclude=all.tgz . && mv ../all.tgz all.tgz); }
# GoldenCuda (test_golden) with its log to $out/$1 (default golden.txt), its summary printed; $2: time limit.
golden_run() {
  local log=$out/${1:-golden.txt}
  timeout "${2:-90}" $B/bin/test_golden --gtest_brief=1 > "$log" 2>&1
  echo "golden rc=$?"; grep -E "PASSED|FAILED" "$log" | head -5
}
# Main's binary (/tmp/main-bin/bloomery, carried as .devcarry-all/main.txz) against the bundle's, process by
# process, three rounds in alternation: ab_processes LOG LIMIT bloomery-args… (each run's .txt and .json in
# $out as main-R / change-R, the tg and pp rows of every run in $out/LOG).
ab_processes() {
  local log=$1 limit=$2 r v
  shift 2
  tar -C /tmp -xJf .devcarry-all/main.txz
  for r in 1 2 3; do
    for v in main change; do
      local run=($B/bin/bloomery)
      [ $v = main ] && run=(/tmp/main-bin/bloomery)
      timeout "$limit" "${run[@]}" "$@" --json-out $out/$v-$r.json > $out/$v-$r.txt 2>&1
      grep -E "^\| (tg|pp)" $out/$v-$r.txt | sed "s/^/$v round $r: /"
    done
  done | tee $out/$log
}
# A call's time budget: BUDGET seconds (default $1) from now. `fits S WHAT` is false, and says so, for a step of
# up to S seconds that could end past it.
start_budget() { start=$SECONDS; budget=${BUDGET:-$1}; }
fits() { [ $((SECONDS - start + $1)) -le $budget ] || { echo "skipped (${2}): would pass ${budget} s"; false; }; }
