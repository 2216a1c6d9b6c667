#!/usr/bin/env bash
# Configures and builds bloomery into build/ (CUDA backend when nvcc exists, CPU-only otherwise).
# Extra arguments go to cmake's configure step, e.g. scripts/build.sh -DBLOOMERY_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja "$@" >/dev/null
cmake --build build -j"$(nproc)"
