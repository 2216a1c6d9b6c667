#!/usr/bin/env bash
# Programmatic dependent launch (issue 12), one device call: the GPU suite and GoldenCuda with PDL on (the
# default), the tg A/B in stream order (rows tgN) against PDL (tgN+pdl) for both layouts and qwen3_next, then
# issue 13's spec cost rows and issue 14's qwen4_exp transformers goldens from the saved master. Build first:
#   scripts/device-bundle.sh && mkdir -p .devcarry-all && tar -czf .devcarry-all/b.tgz .devcarry/bundle
# then: device run, carry [".devcarry-all"], command: bash scripts/gpu/pdl.sh
# Everything lands in $OUT/all.tgz (a call returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
gpu_suite gpu-tests.txt '' 220
timeout 110 $B/bin/test_golden --gtest_brief=1 > $out/golden.txt 2>&1
echo "golden rc=$?"; grep -E "PASSED|FAILED|tests ran" $out/golden.txt | head
# GEMV time per decode shape, launched back to back, PDL off then on.
for pdl in 0 1; do
  BLOOMERY_CUDA_PDL=$pdl timeout 60 $B/bin/test_gpu --gtest_filter=CudaLinear.GemvBandwidth > $out/gemv-shapes-pdl$pdl.txt 2>&1
  echo "gemv shapes pdl=$pdl rc=$?"; grep -E "gemv-shape\] BF16" $out/gemv-shapes-pdl$pdl.txt
done
ab() {  # ab <name> <bench args...>
  local name=$1; shift
  timeout 200 $B/bin/bloomery bench --backend cuda -p 0 -n 32 -d 4096 -r 3 --ab pdl "$@" \
    --json-out $out/ab-pdl-$name.json > $out/ab-pdl-$name.txt 2>&1
  echo "ab $name rc=$?"; grep -E "^\| tg|graphs \(" $out/ab-pdl-$name.txt | head
}
ab nvidia --synthetic qwen4_exp -c 1,16
ab qad --synthetic qwen4_exp --synthetic-layout qad -c 1
ab qwen3_next --synthetic qwen3_next -c 1
timeout 120 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 16 -d 4096 -c 1 -r 3 \
  --spec-rows 2,4,8,9 --json-out $out/spec-cost.json > $out/spec-cost.txt 2>&1
echo "spec rc=$?"; grep -E "^\| (tg|verify|draft)" $out/spec-cost.txt | head
FROM_MASTER_DIR=$(bash reference/trained/rebuild_masters.sh /tmp/masters) FAMILIES=qwen4_exp OUT=$out/trained timeout 200 \
  bash scripts/gpu/trained.sh > $out/trained.log 2>&1
echo "trained rc=$?"; grep -E "PASS|FAIL|PPL|golden" $out/trained.log | head -20
# Issue 14's CUDA columns for the committed qwen3_next / glm5_next folders: PPL and KL / top-1 against the CPU.
for d in tests/fixtures/trained/qwen3_next-* tests/fixtures/trained/glm5_next-*; do
  n=$(basename "$d")
  for be in cpu cuda; do
    kl=(--kl-divergence-base /tmp/$n.kld); [ $be = cuda ] && kl=(--kl-divergence /tmp/$n.kld)
    echo "== $n $be" >> $out/trained-kl.txt
    timeout 60 $B/bin/bloomery perplexity -m "$d" -f reference/trained/corpus/heldout.txt --ctx 128 --chunks 256 \
      --backend $be "${kl[@]}" >> $out/trained-kl.txt 2>&1 || echo "FAIL $n $be" >> $out/trained-kl.txt
  done
done
grep -E "==|PPL|KL|top|FAIL" $out/trained-kl.txt | head -40
(cd $out && tar czf all.tgz --remove-files *)
