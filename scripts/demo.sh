#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install dependencies, build, and run bloomery on a bundled tiny model
# (tests/fixtures/models/, made by reference/make_fixtures.sh). MODEL=<folder> picks another checkpoint folder.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
model=${MODEL:-tests/fixtures/models/qwen4_exp-modelopt-mixed}
echo
echo "== bloomery inspect $model"
build/src/tools/bloomery inspect "$model"
if build/src/tools/bloomery --help | grep -q '^  run '; then
  echo
  echo "== bloomery run -m $model"
  build/src/tools/bloomery run -m "$model" -p "The quick brown fox" -n 24
fi
