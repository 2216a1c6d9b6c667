#!/usr/bin/env bash
# Session-6 device call 3: cuBLASLt for BF16 prompt products (correctness, pp4096 A/B against the project's
# tensor-core kernel), the per-op prompt profile, then the qwen4_exp trained model (issue 14).
set -uo pipefail
source scripts/gpu/bundle-env.sh
ls /usr/local/cuda/lib64/libcublasLt.so* 2>&1 | head -2
gpu_suite gpu-tests.txt '*Linear*:*GemmTc*:*GoldenCuda*:*StepGraph*:-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 150
timeout 90 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 4096 --pp-depths 0 -n 0 -c 1 -r 3 \
  --ab gemm-lib --json-out $out/ab-gemm-lib.json > $out/ab-gemm-lib.txt 2>&1
echo "ab rc=$?"; grep -E "pp|bandwidth" $out/ab-gemm-lib.txt | head -8
BLOOMERY_CUDA_GRAPHS=0 BLOOMERY_CUDA_OP_TIMES=1 timeout 60 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp \
  -p 4096 --pp-depths 0 -n 0 -c 1 -r 1 --json-out $out/pp-optimes.json > $out/pp-optimes.txt 2>&1
echo "pp op times rc=$?"; grep -A30 "per-op" $out/pp-optimes.txt | head -32
left=$(( 590 - SECONDS )); echo "trained: $left s left"
FAMILIES=qwen4_exp MAX_SECONDS=170 timeout $left bash scripts/gpu/trained.sh > $out/trained-call.txt 2>&1
echo "trained rc=$?"; grep -E "PASS|FAIL|NOTE|PPL|acceptance|bit-identical|Error|error" $out/trained-call.txt | head -40
ls -la $out
