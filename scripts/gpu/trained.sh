#!/usr/bin/env bash
# ON the GPU machine (repo root): trains the tiny models, exports them and their goldens (issue 14).
#   bash scripts/gpu/trained.sh [--smoke]      env: FAMILIES (default "qwen3_next qwen4_exp glm5_next"),
#                                              MAX_SECONDS (training wall budget per family, default 200),
#                                              FROM_MASTER_DIR (export the master-<family>.npz saved there instead of
#                                              training; relative to the repo root)
#   --smoke: 8 steps and tiny evaluations (about 1-1.5 min): shows that training, the qwen4_exp indexer check,
#   export and goldens all run; its outputs are named smoke-* and must never be committed.
#   qwen4_exp alone, smoke first, one device call (no carry needed):
#     FAMILIES=qwen4_exp bash scripts/gpu/trained.sh --smoke && FAMILIES=qwen4_exp MAX_SECONDS=210 bash scripts/gpu/trained.sh
# With the bundle carried (scripts/device-bundle.sh bloomery; carry [".devcarry"]) it also measures the
# trained folders with `bloomery perplexity` on the CPU and CUDA engines into $OUT/trained-ppl.txt (the same
# 256 windows of 128 as the f32 reference in logs/<family>.json; table: reference/trained/report.py).
# Results in $OUT ([smoke-] prefix for --smoke):
#   [smoke-]trained-<family>.tar   tests/fixtures/trained/...: folders, goldens, logs (training log, loss PNG,
#                                  summary json, training stdout); unpack with
#                                  for t in <files_at>/trained-*.tar; do tar -C <repo> -xf "$t"; done
#   [smoke-]make_trained.log       everything printed; [smoke-]train-<family>.log the family's stdout;
#   [smoke-]<family>.png           the loss curve (also inside the tar)
#   master-<family>.npz            the trained weights, saved before export (full run only): if the export or the
#                                  goldens fail or are cut off, rerun with them in the tree and
#                                  FROM_MASTER_DIR=<their folder> (no retraining)
#   trained-ppl.txt                with the bundle only
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/trained-out}
mkdir -p "$out"
mode=${1:-}
prefix=
[ "$mode" = "--smoke" ] && prefix=smoke-
status=0
MASTER_DIR="$out" bash reference/make_trained.sh "$out/work" "$mode" 2>&1 | tee "$out/${prefix}make_trained.log" || status=1
mv "$out"/work/*trained-*.tar "$out/" 2>/dev/null || true
for f in "$out"/work/train-*.log; do [ -f "$f" ] && cp "$f" "$out/$prefix$(basename "$f")"; done
for f in "$out"/work/gen/tests/fixtures/trained/logs/*.png; do [ -f "$f" ] && cp "$f" "$out/$prefix$(basename "$f")"; done
bin=.devcarry/bundle/bin/bloomery
if [ -z "$prefix" ] && [ -x "$bin" ] && [ -d "$out/work/gen/tests/fixtures/trained" ]; then
  export LD_LIBRARY_PATH="$PWD/.devcarry/bundle/lib:${LD_LIBRARY_PATH:-}"
  for d in "$out"/work/gen/tests/fixtures/trained/*-*/; do
    name=$(basename "$d")
    [ "$name" = goldens ] && continue
    # CPU first writes its logits; CUDA then reports PPL and its KL / top-1 against the CPU engine.
    echo "== $name cpu" >> "$out/trained-ppl.txt"
    "$bin" perplexity -m "$d" -f reference/trained/corpus/heldout.txt --ctx 128 --chunks 256 --backend cpu \
      --kl-divergence-base "/tmp/$name.kld" >> "$out/trained-ppl.txt" 2>&1 || echo "FAIL perplexity $name cpu" >> "$out/trained-ppl.txt"
    echo "== $name cuda (KL against the cpu run)" >> "$out/trained-ppl.txt"
    "$bin" perplexity -m "$d" -f reference/trained/corpus/heldout.txt --ctx 128 --chunks 256 --backend cuda \
      --kl-divergence "/tmp/$name.kld" >> "$out/trained-ppl.txt" 2>&1 || echo "FAIL perplexity $name cuda" >> "$out/trained-ppl.txt"
    rm -f "/tmp/$name.kld"
  done
  cat "$out/trained-ppl.txt"
fi
rm -rf "$out/work"  # the tars hold everything; what stays under $OUT comes back
ls -l "$out"
exit $status
