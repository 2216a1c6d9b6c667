#!/usr/bin/env bash
# Device call: issue 15's perplexity gate on the trained models at this tree's defaults (prompt attention on the
# tensor cores): `bloomery perplexity` on the CPU engine (which writes its logits) and on CUDA (PPL, KL and
# top-1 against the CPU run) for the folders whose families use the prompt attention op (qwen4_exp, qwen3_next).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery, tar -cJf .devcarry-all/b.txz
#   .devcarry/bundle (lean-tree off: the trained folders travel). device run, carry [".devcarry-all"],
#   command: bash scripts/gpu/trained-ppl.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
for name in qwen4_exp-fp4local-csf qwen4_exp-modelopt-mixed qwen3_next-modelopt-mixed; do
  d=tests/fixtures/trained/$name
  for be in cpu cuda; do
    kl=(--kl-divergence-base /tmp/$name.kld)
    [ $be = cuda ] && kl=(--kl-divergence /tmp/$name.kld)
    echo "== $name $be" >> $out/trained-ppl.txt
    timeout 60 $B/bin/bloomery perplexity -m $d -f reference/trained/corpus/heldout.txt --ctx 128 --chunks 256 \
      --backend $be "${kl[@]}" >> $out/trained-ppl.txt 2>&1 || echo "FAIL $name $be" >> $out/trained-ppl.txt
  done
  pack
done
grep -E "^==|PPL|KL|top|FAIL" $out/trained-ppl.txt | head -60
pack
find $out -mindepth 1 -not -name all.tgz -delete
