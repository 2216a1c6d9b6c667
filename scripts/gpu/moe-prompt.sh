#!/usr/bin/env bash
# Device calls for the MoE prompt path's grouped GEMMs in the tall warp layout (gemm/tc_gemm.cu WarpTile) and
# whole-prompt grouped passes (issue 15). Both run the grouped and dense GEMM tests (every layout against the
# CPU) and the routed-expert tests, main's binary (/tmp/main-bin from .devcarry-all/main.txz) against the
# change process by process (pp4096, three rounds) and GoldenCuda. measure: also the routed-shape throughput of
# each layout and main against both tiles at --ub 512 and 2048; final: also the wide tile at the whole prompt.
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery test_gpu test_golden,
#   tar -cJf .devcarry-all/b.txz .devcarry/bundle, main.txz; lean-tree.sh on.
#   device run, carry [".devcarry-all"], command: bash scripts/gpu/moe-prompt.sh measure|final
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
pp=(bench --backend cuda --synthetic qwen4_exp -p 4096 --pp-depths 0 -n 0 -c 1)
tests() {
  timeout 150 $B/bin/test_gpu --gtest_brief=1 \
    --gtest_filter='GroupedGemm.*:GemmTc.*:CudaMoe.*-*Throughput*:*Crossover*:*Bandwidth*' > $out/gemm-tests.txt 2>&1
  echo "gemm+moe tests rc=$?"; grep -E "FAILED|PASSED|Failure|tests ran" $out/gemm-tests.txt | head -20
  grep -E "^\[grouped\]" $out/gemm-tests.txt | head -40
  pack
}
case "${1:-measure}" in
  measure)  # every layout and switch (call 2 of 2026-12-03, with the 128- and 64-row tall layouts)
    tests
    timeout 120 $B/bin/test_gpu --gtest_filter='GemmTc.GroupedRoutedThroughput' > $out/routed-throughput.txt 2>&1
    echo "routed throughput rc=$?"; grep -E "^\[routed\]" $out/routed-throughput.txt
    pack
    ab_processes ab-pp.txt 100 "${pp[@]}" -r 2
    pack
    for ub in 512 2048; do
      timeout 100 /tmp/main-bin/bloomery "${pp[@]}" --ub $ub -r 2 > $out/main-ub$ub.txt 2>&1
      grep -E "^\| pp" $out/main-ub$ub.txt | sed "s/^/main ub $ub: /"
      for v in tall wide; do
        env BLOOMERY_CUDA_GROUPED_TILE=$v timeout 100 $B/bin/bloomery "${pp[@]}" --ub $ub -r 2 \
          > $out/change-ub$ub-$v.txt 2>&1
        grep -E "^\| pp" $out/change-ub$ub-$v.txt | sed "s/^/change ub $ub $v: /"
      done
    done
    pack
    golden_run
    ;;
  final)  # the kept defaults: tests, main against the change three rounds, GoldenCuda, the wide tile
    tests
    ab_processes ab-pp.txt 100 "${pp[@]}" -r 2
    pack
    golden_run
    pack
    BLOOMERY_CUDA_GROUPED_TILE=wide timeout 100 $B/bin/bloomery "${pp[@]}" -r 2 > $out/change-wide.txt 2>&1
    grep -E "^\| pp" $out/change-wide.txt | sed "s/^/change wide: /"
    ;;
esac
pack
find $out -mindepth 1 -not -name all.tgz -delete
