#!/usr/bin/env bash
# The one command that regenerates every model fixture and golden (tests/fixtures/README.md).
# Needs: python3 with torch 2.11, transformers 5.17, tokenizers 0.23.2, numpy (the GPU machine's image; no network).
#   bash reference/make_fixtures.sh OUT_DIR            -> OUT_DIR/gen/tests/fixtures/... + OUT_DIR/fixtures-<family>.tar
#   bash reference/make_fixtures.sh OUT_DIR --check    -> also compares every file with the committed MANIFEST.sha256
#   bash reference/make_fixtures.sh OUT_DIR --twice    -> generates twice in fresh processes and compares (determinism)
# Unpack here with: for t in OUT_DIR/fixtures-*.tar; do tar -C <repo> -xf "$t"; done
# Then the CUDA gate's BF16 calibration (docs/accuracy.md), in the checkout: cd reference && python3 -m fixtures.bf16_noise
set -euo pipefail
OUT=$(mkdir -p "${1:?usage: make_fixtures.sh OUT_DIR [--check|--twice]}" && cd "$1" && pwd)
MODE=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
cd "$HERE"
"$PY" -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'
"$PY" -m fixtures.qfmt
status=0
"$PY" -m fixtures.gen "$OUT/gen" --jobs "${JOBS:-8}" || status=$?
MAN="$OUT/gen/tests/fixtures/MANIFEST.sha256"
for fam in qwen3_next qwen4_exp glm5_next; do
  (cd "$OUT/gen" && tar -cf "$OUT/fixtures-$fam.tar" tests/fixtures/models/$fam-* tests/fixtures/goldens/$fam-*)
done
cp "$MAN" "$OUT/MANIFEST.sha256"
if [ "$MODE" = "--twice" ]; then
  "$PY" -m fixtures.gen "$OUT/gen2" --jobs "${JOBS:-8}" > "$OUT/gen2.log" 2>&1 || true
  if cmp -s "$MAN" "$OUT/gen2/tests/fixtures/MANIFEST.sha256"; then
    echo "PASS determinism: a second generation in fresh processes is bit-identical"
  else
    echo "FAIL determinism: second generation differs"; diff "$MAN" "$OUT/gen2/tests/fixtures/MANIFEST.sha256" | head -20; status=1
  fi
fi
if [ "$MODE" = "--check" ]; then
  if cmp -s "$MAN" "$REPO/tests/fixtures/MANIFEST.sha256"; then
    echo "PASS reproduce: every regenerated file matches the committed MANIFEST.sha256 bit for bit"
  else
    echo "FAIL reproduce: regenerated files differ from the committed manifest"
    diff "$REPO/tests/fixtures/MANIFEST.sha256" "$MAN" | head -40; status=1
  fi
fi
exit $status
