#!/usr/bin/env bash
# Device calls for the decode GEMVs' L2 prefetch (issue 12; gemv/gemv.cu cuda::set_gemv_prefetch for the
# split-K kernel, gemv/gemv_tc.cu cuda::set_gemv_tc_prefetch for the tensor-core one).
#   measure: the prefetch bit-equality tests, the launch sweep with the prefetch's column, then the in-process
#            A/B (`bench --ab gemv-prefetch` at C = 1 and 4, `--ab gemv-tc-prefetch` at C = 4, three
#            alternating repeats each) in both layouts;
#   check:   the GPU suite and GoldenCuda on this tree (its defaults), then the prefetches off (main's kernels:
#            BLOOMERY_CUDA_GEMV_PREFETCH=0 BLOOMERY_CUDA_GEMV_TC_PREFETCH=0) against this tree's defaults, process
#            by process, three rounds, the layouts in LAYOUTS (default: nvidia qad).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden, the bundle
#   packed as .devcarry-all/b.txz; device run, carry [".devcarry-all"], command: bash scripts/gpu/gemv-prefetch.sh
#   MODE. LAYERS=24 (default) cuts the model so that it fits an H100; LAYERS=0 is full size (an H200).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
layers=${LAYERS:-24}
cut=()
[ "$layers" != 0 ] && cut=(--layers "$layers")
bench() {  # bench LAYOUT NAME args…
  local layout=$1 name=$2
  shift 2
  timeout 170 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp --synthetic-layout $layout "${cut[@]}" \
    -p 0 -n 32 -d 4096 "$@" --json-out $out/$name.json > $out/$name.txt 2>&1
  echo "$name rc=$?"; grep -E "^\| tg" $out/$name.txt | head -20
  pack
}
case "${1:-measure}" in
  measure)  # about 8 minutes
    timeout 60 $B/bin/test_gpu --gtest_brief=1 --gtest_filter='CudaLinear.Gemv*Prefetch*' > $out/prefetch-tests.txt 2>&1
    echo "prefetch tests rc=$?"; grep -E "FAILED|PASSED|Failure" $out/prefetch-tests.txt | head
    timeout 150 $B/bin/test_gpu --gtest_filter='CudaLinear.GemvLaunchSweepBandwidth' > $out/sweep.txt 2>&1
    echo "sweep rc=$?"; grep -E "^\[gemv-sweep-prefetch\]" $out/sweep.txt
    pack
    for layout in nvidia qad; do
      bench $layout ab-$layout -c 1,4 -r 3 --ab gemv-prefetch
      bench $layout ab-tc-$layout -c 4 -r 3 --ab gemv-tc-prefetch
    done
    ;;
  check)  # about 9 minutes
    gpu_suite gpu-tests.txt '-*Timings*:*Timing*:*Bandwidth*:*Throughput*:*Crossover*' 220
    pack
    golden_run golden.txt 100
    pack
    for layout in ${LAYOUTS:-nvidia qad}; do
      for r in 1 2 3; do
        for v in off default; do
          envs=()
          [ $v = off ] && envs=(BLOOMERY_CUDA_GEMV_PREFETCH=0 BLOOMERY_CUDA_GEMV_TC_PREFETCH=0)
          env "${envs[@]}" timeout 90 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp \
            --synthetic-layout $layout "${cut[@]}" -p 0 -n 32 -d 4096 -c 1,4 -r 1 \
            --json-out $out/$layout-$v-$r.json > $out/$layout-$v-$r.txt 2>&1
          grep -E "^\| tg" $out/$layout-$v-$r.txt | sed "s/^/$layout $v round $r: /"
        done
      done | tee $out/ab-rounds-$layout.txt
      pack
    done
    ;;
esac
find $out -mindepth 1 -not -name all.tgz -delete
