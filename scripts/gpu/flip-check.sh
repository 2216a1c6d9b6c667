#!/usr/bin/env bash
# One device call of at most BUDGET seconds (default 430; a step that could end past it is skipped), packing
# after every step:
#   1. plain BF16 prompt activations as the build's default (gemm.cu kDefaultGemmMode): the GEMM and GEMV tests
#      and GoldenCuda in that mode (the calibrated gate), the speculative-decoding tests' quick part;
#   2. issue 13's adaptive width on the card, bench's slot rows with the fixed draft-row cost (0.25 of a step)
#      and with the measured one (BLOOMERY_SPEC_MEASURED_COST=1): the trained FP4-Local qwen4_exp at K = 1 and
#      3 (held-out text), then the full-size synthetic (drafts rejected) at C = 1 and 16;
#   3. issue 12: Nsight Compute per-kernel profiles of a C = 16 and a C = 1 decode step (nvidia layout).
# Carry .devcarry-all with the lean tree on. Command: bash scripts/gpu/flip-check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
set_model_cut
start_budget 430

timeout 120 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='CudaLinear.*:GemmTc*:GroupedGemm*:CudaMoe*:*GoldenCuda*:-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*:*Sweep*' \
  > $out/gpu-tests.txt 2>&1
echo "gpu tests rc=$? at $((SECONDS - start)) s"; grep -E "FAILED|PASSED|tests ran|Failure" $out/gpu-tests.txt | head -20
BLOOMERY_SPEC_BACKEND=cuda timeout 60 $B/bin/test_runtime --gtest_brief=1 \
  --gtest_filter='*MtpAcceptance*:*CatchUp*:*Deferred*:*PlainRows*:*CommitEquals*' > $out/spec-tests.txt 2>&1
echo "spec tests rc=$? at $((SECONDS - start)) s"; grep -E "FAILED|PASSED|tests ran" $out/spec-tests.txt | head
pack

trained=tests/fixtures/trained/qwen4_exp-fp4local-csf
for m in 0 1; do
  for k in 1 3; do
    fits 40 "trained K=$k measured $m" || continue
    BLOOMERY_SPEC_MEASURED_COST=$m timeout 40 $B/bin/bloomery bench --backend cuda -m $trained -p 0 -n 128 -d 64 \
      -c 1,16 -r 3 --spec-type draft-mtp --spec-draft-n-max $k --spec-text reference/trained/corpus/heldout.txt \
      --json-out $out/trained-k$k-m$m.json > $out/trained-k$k-m$m.txt 2>&1
    echo "trained K=$k measured=$m rc=$? at $((SECONDS - start)) s"; grep -E "^\| tg[0-9]+[@+]" $out/trained-k$k-m$m.txt
    pack
  done
done
for m in 0 1; do
  fits 100 "synthetic measured $m" || continue
  BLOOMERY_SPEC_MEASURED_COST=$m timeout 100 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp "${cut[@]}" \
    -p 0 -n 32 -d 1024 -c 1,16 -r 3 --spec-type draft-mtp --spec-draft-n-max 3 \
    --json-out $out/synthetic-m$m.json > $out/synthetic-m$m.txt 2>&1
  echo "synthetic measured=$m rc=$? at $((SECONDS - start)) s"; grep -E "^\| tg" $out/synthetic-m$m.txt
  pack
done

NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for c in 16 1; do
  [ -n "$NCU" ] && fits 160 "C = $c profile" || continue
  timeout 150 $NCU --profile-from-start off --graph-profiling node --clock-control none --csv --print-units base \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__registers_per_thread \
    $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp "${cut[@]}" -p 0 -n 2 -d 4096 -c $c -r 1 --profile-tg \
    > $out/nvidia-c$c.csv 2> $out/nvidia-c$c-run.txt
  echo "ncu c$c rc=$? at $((SECONDS - start)) s"; tail -2 $out/nvidia-c$c-run.txt
  python3 scripts/gpu/ncu-sum.py $out/nvidia-c$c.csv 2 > $out/nvidia-c$c-sum.txt 2>&1; head -40 $out/nvidia-c$c-sum.txt
  pack
done
find $out -mindepth 1 -not -name all.tgz -delete
