#!/usr/bin/env bash
# Builds the GPU-facing binaries HERE (the GPU machine has no Debian dev packages and no internet) for sm_90a
# and packs them, with the few shared libraries they need beyond the base system, into .devcarry/bundle/.
# Then a device call carries `.devcarry` and runs `bash scripts/gpu-test.sh` there.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-dev -G Ninja -DBLOOMERY_CUDA=ON -DBLOOMERY_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=Release >/dev/null
# Targets to bundle: the arguments, or every GPU-relevant one that exists.
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for t in bloomery test_gpu test_golden; do
    ninja -C build-dev -t targets all 2>/dev/null | grep -q "^$t:" && targets+=("$t")
  done
fi
ninja -C build-dev -j2 "${targets[@]}"
rm -rf .devcarry/bundle && mkdir -p .devcarry/bundle/bin .devcarry/bundle/lib
for t in "${targets[@]}"; do
  f=$(find build-dev -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$f" ] && strip -o ".devcarry/bundle/bin/$t" "$f"
done
for lib in libfmt.so.9 libpcre2-8.so.0 libutf8proc.so.2; do
  cp -L "/usr/lib/x86_64-linux-gnu/$lib" .devcarry/bundle/lib/
done
du -sh .devcarry/bundle
