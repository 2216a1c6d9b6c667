#!/usr/bin/env bash
# The one command that retrains the three tiny trained models and rewrites tests/fixtures/trained/
# (reference/trained/, docs/accuracy.md). Needs python3 with torch 2.11, transformers 5.17, tokenizers 0.23.2,
# numpy and one CUDA device (the GPU machine's image; no network).
#   [FAMILIES="qwen4_exp ..."] [MAX_SECONDS=S] [MASTER_DIR=D] [FROM_MASTER_DIR=D] [LAYOUTS=l1,l2] bash reference/make_trained.sh OUT_DIR [--smoke]
# FAMILIES: which families (default all three); MAX_SECONDS: training wall budget per family (train.py default
# 200); MASTER_DIR: where each trained master is saved before export (default OUT_DIR/masters; master-<family>.npz);
# FROM_MASTER_DIR: skip training and export the masters saved there (an export that failed or was cut off);
# LAYOUTS: only these layouts (a golden that was cut off; the summary json is then left as it is).
# The three families train at once, one process each, on the one device (each takes ~1/3 of the card; the
# models are tiny and launch-bound). Writes OUT_DIR/gen/tests/fixtures/trained/... and OUT_DIR/trained-<family>.tar.
# Unpack into a checkout with:  for t in OUT_DIR/trained-*.tar; do tar -C <repo> -xf "$t"; done
set -euo pipefail
OUT=$(mkdir -p "${1:?usage: make_trained.sh OUT_DIR [--smoke]}" && cd "$1" && pwd)
MODE=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
# the master folders as absolute paths (relative ones are taken from where the script was started)
absdir() { mkdir -p "$1" && cd "$1" && pwd; }
MASTER_DIR=$(absdir "${MASTER_DIR:-$OUT/masters}")
if [ -n "${FROM_MASTER_DIR:-}" ]; then
  [ -d "$FROM_MASTER_DIR" ] || { echo "FAIL FROM_MASTER_DIR=$FROM_MASTER_DIR is not a folder"; exit 2; }
  FROM_MASTER_DIR=$(cd "$FROM_MASTER_DIR" && pwd)
fi
export PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
cd "$HERE"
"$PY" -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "cuda", torch.cuda.is_available())'
rm -rf "$OUT/gen/tests/fixtures/trained"
FAMS=${FAMILIES:-qwen3_next qwen4_exp glm5_next}
for fam in $FAMS; do
  case $fam in qwen3_next|qwen4_exp|glm5_next) ;; *) echo "FAIL unknown family '$fam' in FAMILIES (qwen3_next qwen4_exp glm5_next)"; exit 2 ;; esac
done
args=()
[ "$MODE" = "--smoke" ] && args+=(--smoke)
[ -n "$MODE" ] && [ "$MODE" != "--smoke" ] && { echo "FAIL unknown option '$MODE' (expected --smoke or nothing)"; exit 2; }
[ -n "${MAX_SECONDS:-}" ] && args+=(--max-seconds "$MAX_SECONDS")
[ -n "${LAYOUTS:-}" ] && args+=(--layouts "$LAYOUTS")
[ "$MODE" = "--smoke" ] || args+=(--save-master "$MASTER_DIR")
pids=()
for fam in $FAMS; do
  fargs=("${args[@]}")
  if [ -n "${FROM_MASTER_DIR:-}" ]; then
    [ -f "$FROM_MASTER_DIR/master-$fam.npz" ] || { echo "FAIL no $FROM_MASTER_DIR/master-$fam.npz"; exit 2; }
    fargs+=(--from-master "$FROM_MASTER_DIR/master-$fam.npz")
  fi
  "$PY" -m trained.train "$OUT/gen" --family "$fam" "${fargs[@]}" > "$OUT/train-$fam.log" 2>&1 &
  pids+=($!)
done
status=0
i=0
for fam in $FAMS; do
  if wait "${pids[$i]}"; then echo "PASS $fam (log: $OUT/train-$fam.log)"; else echo "FAIL $fam (log: $OUT/train-$fam.log)"; status=1; fi
  grep -E '^(PASS|FAIL|NOTE)|held-out PPL|parameters|trained |batched QSA indexer ==' "$OUT/train-$fam.log" | sed "s/^/  /" || true
  i=$((i + 1))
done
# One tar per family (the GPU machine returns files of at most 16 MiB): its folders, goldens, logs. A smoke
# run's tars are named smoke-trained-*.tar: they only show that everything runs; never commit them.
prefix=
[ "$MODE" = "--smoke" ] && prefix=smoke-
if [ -d "$OUT/gen/tests/fixtures/trained" ]; then
  for fam in $FAMS; do
    mkdir -p "$OUT/gen/tests/fixtures/trained/logs"
    cp "$OUT/train-$fam.log" "$OUT/gen/tests/fixtures/trained/logs/$fam.stdout.log"
    files=$(cd "$OUT/gen" && ls -d tests/fixtures/trained/$fam-* tests/fixtures/trained/goldens/$fam-* \
      tests/fixtures/trained/logs/$fam.* 2>/dev/null || true)
    if [ -n "$files" ]; then
      (cd "$OUT/gen" && tar -cf "$OUT/${prefix}trained-$fam.tar" $files)
    else
      echo "FAIL no outputs to pack for $fam"
      status=1
    fi
  done
  echo "trained folders: $(du -sh "$OUT/gen/tests/fixtures/trained" | cut -f1); tars:"
  ls -l "$OUT"/*trained-*.tar || true
fi
[ $status -eq 0 ] && echo "ALL PASS" || echo "SOME FAIL"
exit $status
