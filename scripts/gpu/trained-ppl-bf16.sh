#!/usr/bin/env bash
# Device call (about 2-3 minutes): issue 15's perplexity gate on the trained models with plain BF16 prompt
# activations (BLOOMERY_CUDA_GEMM=bf16, the candidate default): `bloomery perplexity` on the CPU engine (f32,
# which writes its logits) and on CUDA (PPL, KL and top-1 against the CPU run), ctx 128 (prompt GEMMs).
# Build and carry: BUILD_DIR=build-dev scripts/device-bundle.sh bloomery, tar -c .devcarry/bundle | xz -T2 -6 >
#   .devcarry-all/b.txz (the trained folders and the corpus travel). device run, carry [".devcarry-all"],
#   command: bash scripts/gpu/trained-ppl-bf16.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/bundle-env.sh
for name in ${FOLDERS:-qwen4_exp-fp4local-csf qwen3_next-modelopt-mixed qwen4_exp-modelopt-mixed}; do
  d=tests/fixtures/trained/$name
  for be in cpu cuda; do
    kl=(--kl-divergence-base /tmp/$name.kld)
    [ $be = cuda ] && kl=(--kl-divergence /tmp/$name.kld)
    echo "== $name $be" >> $out/trained-ppl.txt
    BLOOMERY_CUDA_GEMM=bf16 timeout 60 $B/bin/bloomery perplexity -m $d -f reference/trained/corpus/heldout.txt \
      --ctx 128 --chunks 256 --backend $be "${kl[@]}" >> $out/trained-ppl.txt 2>&1 ||
      echo "FAIL $name $be" >> $out/trained-ppl.txt
  done
  grep -E "^==|Final|ln\(PPL|Mean +KLD|Same top|FAIL" $out/trained-ppl.txt | tail -6
  pack
done
find $out -mindepth 1 -not -name all.tgz -delete
