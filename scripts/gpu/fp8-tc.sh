#!/usr/bin/env bash
# Device calls for the FP8 family on the tensor-core decode GEMV (issue 12: the qad / FP4-Local layout's MXFP8
# projections; gemv/gemv_tc.cu), and the first GPU run of 2026-12-05's untested work (the card's row draws in
# the server, batched drafts, drafting under TP on CUDA ranks).
#   check: the GPU suite (GoldenCuda, CudaOps.DrawLastRowsAreTheSamplersDrawsRowByRow and
#          CudaLinear.GemvTcFp8MatchesReference in it), test_golden, the SpecDecode tests on the card, `run
#          --tp 2` with drafting over the one-GPU loopback against TP 1, and the MXFP8 GEMV bandwidth sweep;
#   ab:    the GEMV tests on the final code, the MXFP8 sweep, main's binary
#          (.devcarry-all/main.txz) against this tree's, process by process, three rounds, the qad layout at
#          C = 1 and 4 (the nvidia layout has no FP8 GEMV product), then the BF16 noise of every fixture
#          (reference/fixtures/bf16_noise.py, the CUDA accuracy gate's calibration).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden test_runtime,
#   tar -cJf .devcarry-all/b.txz .devcarry/bundle; lean-tree.sh on. device run, carry [".devcarry-all"],
#   command: bash scripts/gpu/fp8-tc.sh check|ab
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
q=(bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 --synthetic-layout qad)
case "${1:-check}" in
  check)  # about 7 minutes
    gpu_suite gpu-tests.txt '-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 240
    pack
    golden_run golden.txt 120
    pack
    BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=1000 timeout 150 $B/bin/test_runtime --gtest_brief=1 \
      --gtest_filter='*SpecDecode*' > $out/spec-cuda.txt 2>&1
    echo "spec cuda rc=$?"; grep -E "FAILED|PASSED|tests ran|Failure" $out/spec-cuda.txt | head
    pack
    for m in qwen4_exp-bf16 qwen3_next-bf16 glm5_next-bf16; do
      for tp in 1 2; do
        timeout 60 $B/bin/bloomery run -m tests/fixtures/models/$m --backend cuda --tp $tp --prompt-ids 1,2,3,4,5,6,7,8 \
          -n 64 --print-ids --no-progress --spec-type draft-mtp > $out/run-$m-tp$tp.txt 2>&1
        echo "run $m tp$tp rc=$?"; grep -E "drafted|accept|error" $out/run-$m-tp$tp.txt | head -3
      done
      a=$(grep '^ids:' $out/run-$m-tp1.txt || true); b=$(grep '^ids:' $out/run-$m-tp2.txt || true)
      if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "$m: tp2 drafting ids equal tp1"; else echo "$m: tp2 ids DIFFER"; fi
    done
    pack
    timeout 120 $B/bin/test_gpu --gtest_filter='CudaLinear.GemvTcBandwidth' > $out/gemv-tc-bandwidth.txt 2>&1
    echo "bandwidth rc=$?"; grep -E "^\[gemv-tc\] MXFP8" $out/gemv-tc-bandwidth.txt | grep -E "T=(1|4):" | head -30
    pack
    ;;
  ab)  # about 8 minutes
    timeout 90 $B/bin/test_gpu --gtest_brief=1 \
      --gtest_filter='CudaLinear.GemvTc*:CudaLinear.StoredFormats*:CudaLinear.Gemv*Equal*:BlockOps.*:-*Bandwidth*' \
      > $out/gemv-tests.txt 2>&1
    echo "gemv tests rc=$?"; grep -E "FAILED|PASSED|Failure" $out/gemv-tests.txt | head
    timeout 100 $B/bin/test_gpu --gtest_filter='CudaLinear.GemvTcBandwidth' > $out/gemv-tc-bandwidth.txt 2>&1
    echo "bandwidth rc=$?"; grep -E "^\[gemv-tc\] MXFP8" $out/gemv-tc-bandwidth.txt | grep -E "T=(1|4):" | head -16
    pack
    ab_processes ab-rounds.txt 70 "${q[@]}" -c 1,4 -r 1
    pack
    # The CUDA accuracy gate's calibration: transformers' BF16 forward against its f32 one on every fixture.
    (cd reference && timeout 150 python3 -m fixtures.bf16_noise .. $out/bf16_noise.json) > $out/bf16-noise.txt 2>&1
    echo "bf16 noise rc=$?"; tail -12 $out/bf16-noise.txt
    pack
    ;;
esac
find $out -mindepth 1 -not -name all.tgz -delete
