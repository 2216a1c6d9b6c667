#!/usr/bin/env bash
# Device call for prompt attention on the tensor cores (attention/flash_attention.cu, issue 15) and the row-wise
# column copies (misc/elementwise.cu, family/hc_ple.cu): the attention tests against the CPU and the scalar
# kernel, its isolated timing, the other small-op tests, GoldenCuda, pp4096 with the kernel on and
# off in one process (--ab flash-attn, three rounds) and main's binary against the change process by process
# (three rounds), then the per-op profiles of the prompt and of a decode step (eager) at the new default.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden,
#   tar -cJf .devcarry-all/b.txz .devcarry/bundle, main.txz (main's bloomery); lean-tree.sh on.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/flash-attn.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
# The attention tests, and the ops whose row-wise kernels changed (column splits and copies, row scales, the
# hyper-connection read mix: CudaOps, BlockOps, Qwen4Ops).
timeout 150 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='CudaOps.*:BlockOps.*:Qwen4Ops.*-CudaOps.Timings' \
  > $out/attention-tests.txt 2>&1
echo "attention tests rc=$?"; grep -E "FAILED|PASSED|Failure|tests ran|^\[flash|^\[attention|^\[time\] prompt" \
  $out/attention-tests.txt | head -40
pack
golden_run golden.txt 120
pack
pp=(bench --backend cuda --synthetic qwen4_exp -p 4096 --pp-depths 0 -n 0 -c 1)
timeout 150 $B/bin/bloomery "${pp[@]}" -r 3 --ab flash-attn --json-out $out/ab-inproc.json > $out/ab-inproc.txt 2>&1
echo "in-process ab rc=$?"; grep -E "^\| pp" $out/ab-inproc.txt
pack
ab_processes ab-pp.txt 100 "${pp[@]}" -r 2
pack
BLOOMERY_CUDA_GRAPHS=0 BLOOMERY_CUDA_OP_TIMES=1 timeout 100 $B/bin/bloomery "${pp[@]}" -r 1 > $out/pp-optimes.txt 2>&1
echo "pp optimes rc=$?"; grep -A30 "per-op device time" $out/pp-optimes.txt
pack
pack
find $out -mindepth 1 -not -name all.tgz -delete
