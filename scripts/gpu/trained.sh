#!/usr/bin/env bash
# ON the GPU machine (repo root): trains the three tiny models, exports them and their goldens (issue 14).
#   device run: command `bash scripts/gpu/trained.sh --smoke` (about 1 min), then `bash scripts/gpu/trained.sh`
#   (about 6 min: 3-4 min training, the rest export + goldens). No carry needed for this part.
# With the bundle carried (scripts/device-bundle.sh bloomery; carry [".devcarry"]) it also measures the
# trained folders with `bloomery perplexity` on the CPU and CUDA engines into $OUT/trained-ppl.txt (the same
# 256 windows of 128 as the f32 reference in logs/<family>.json; table: reference/trained/report.py).
# Results (5 files): $OUT/trained-<family>.tar (tests/fixtures/trained/...: folders, goldens, logs incl. the
# training stdout), $OUT/make_trained.log, $OUT/trained-ppl.txt (with the bundle). Unpack with
#   for t in <files_at>/trained-*.tar; do tar -C <repo> -xf "$t"; done
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/trained-out}
mkdir -p "$out"
status=0
bash reference/make_trained.sh "$out/work" "${1:-}" 2>&1 | tee "$out/make_trained.log" || status=1
mv "$out"/work/*trained-*.tar "$out/" 2>/dev/null || true
bin=.devcarry/bundle/bin/bloomery
if [ -x "$bin" ] && [ -d "$out/work/gen/tests/fixtures/trained" ]; then
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
exit $status
