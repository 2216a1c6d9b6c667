#!/usr/bin/env bash
# MTP speculative decoding on the card (issue 13), run ON the GPU machine from a bundle built here with
#   BUILD_DIR=build-dev BUNDLE=.devcarry/bundle scripts/device-bundle.sh test_runtime test_gpu bloomery
# then a device call: carry [".devcarry"], command: bash scripts/gpu/mtp.sh
# Runs tests/unit/runtime/spec_decode_test.cc on the CUDA backend: every fixture the card can run, greedy
# 1,000 tokens with drafting at k = 1, 3, 8 against drafting off (forced accepts and rejects), the rollback
# (verify + commit equals feeding only the accepted tokens, state parts within 1e-4), and an EOS inside an
# accepted run; then `bloomery run --spec-type draft-mtp` on one fixture for the acceptance printout.
# Logs go to $OUT (or /tmp).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
bundle=${BUNDLE:-.devcarry/bundle}
export LD_LIBRARY_PATH="$PWD/$bundle/lib:${LD_LIBRARY_PATH:-}"
export BLOOMERY_SOURCE_DIR="$PWD"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
status=0
BLOOMERY_SPEC_BACKEND=cuda BLOOMERY_SPEC_TOKENS=${TOKENS:-1000} "$bundle/bin/test_runtime" \
  --gtest_filter='*SpecDecode*' 2>&1 | tee "$out/mtp-cuda.log" || status=1
if [ -x "$bundle/bin/bloomery" ]; then
  for spec in none draft-mtp; do
    "$bundle/bin/bloomery" run -m tests/fixtures/models/qwen4_exp-bf16 --backend cuda --prompt-ids 1,2,3,4,5,6,7,8 \
      -n 200 --print-ids --no-progress --spec-type "$spec" --draft-max 3 2>&1 | tee "$out/mtp-run-$spec.log" || status=1
  done
  a=$(grep '^ids:' "$out/mtp-run-none.log" || true)
  b=$(grep '^ids:' "$out/mtp-run-draft-mtp.log" || true)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "bloomery run: draft-mtp ids equal draft-off"; else
    echo "bloomery run: draft-mtp ids DIFFER from draft-off"; status=1; fi
fi
exit $status
