#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install dependencies, build, and run bloomery on a bundled tiny
# model. With the trained models present (tests/fixtures/trained/, made by reference/make_trained.sh) it runs
# the trained FP4-Local qwen4_exp (a 1.2 M-parameter model, plus a 0.18 M-parameter MTP draft layer, trained on the King James Bible: small, so expect
# scripture-flavoured English, not answers): a greedy continuation, then one chat reply served by
# bloomery-serve. Without them it inspects and runs the random-weight fixture (gibberish by design).
# MODEL=<folder> picks another checkpoint folder; any folder under tests/fixtures/trained/ gets the trained
# demo (scripture prompt + served chat reply).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The demo's model: the trained FP4-Local qwen4_exp (reference/make_trained.sh names its folders
# <family>-<layout>). The random-weight fallback is only for checkouts made before that folder is committed.
trained=tests/fixtures/trained/qwen4_exp-fp4local-csf
fallback=tests/fixtures/models/qwen4_exp-modelopt-mixed
if [ -n "${MODEL:-}" ]; then
  model=$MODEL
elif [ -d "$trained" ]; then
  model=$trained
else
  echo "note: $trained is not in this checkout yet: running the random-weight fixture (gibberish by design)"
  model=$fallback
fi
case "$model" in
  tests/fixtures/trained/* | */tests/fixtures/trained/*) is_trained=1 ;;
  *) is_trained=0 ;;
esac
echo
echo "== bloomery inspect $model"
build/src/tools/bloomery inspect "$model"
echo
echo "== bloomery run -m $model"
if [ "$is_trained" = 1 ]; then
  # Sampled (temperature 0.7, fixed seed): greedy decoding of a model this small loops on one phrase.
  build/src/tools/bloomery run -m "$model" -p "And God said unto Moses," -n 48 --temp 0.7 --seed 1
else
  build/src/tools/bloomery run -m "$model" -p "The quick brown fox" -n 24
fi
serve=build/src/server/bloomery-serve
if [ "$is_trained" = 1 ] && [ -x "$serve" ] && command -v curl >/dev/null; then
  port=${PORT:-18080}
  echo
  echo "== bloomery-serve -m $model --port $port, one chat request"
  "$serve" -m "$model" --port "$port" > /tmp/bloomery-demo-serve.log 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "bloomery-serve exited:"; cat /tmp/bloomery-demo-serve.log; exit 1; }
    sleep 0.2
  done
  body='{"messages":[{"role":"user","content":"Who made the heaven and the earth?"}],"max_tokens":48}'
  echo "request: $body"
  reply=$(curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
  echo "reply:   $(python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])' \
    <<< "$reply" 2>/dev/null || echo "$reply")"
  kill "$pid" && wait "$pid" 2>/dev/null || true
  trap - EXIT
fi
