#!/usr/bin/env bash
# Builds the GPU-facing binaries HERE (the GPU machine has no Debian dev packages and no internet) for sm_90a
# and packs them, with the few shared libraries they need beyond the base system, into $BUNDLE (default
# .devcarry/bundle). Then a device call carries that folder and runs `bash scripts/gpu-test.sh` there.
#   BUILD_DIR=build-dev BUNDLE=.devcarry/bundle scripts/device-bundle.sh [targets...]
# Several people can bundle at once with their own BUILD_DIR / BUNDLE (e.g. build-k1 / .devcarry-k1/bundle).
# ccache, when installed, is used as the compiler launcher (dev machines only; CI does not need it).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-dev}
bundle=${BUNDLE:-.devcarry/bundle}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# A build folder that is already configured keeps its configuration (a dev folder's build type, so that
# bundling does not rebuild it all); a new one is configured for the GPU machine.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DBLOOMERY_CUDA=ON -DBLOOMERY_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=Release \
    "${launcher[@]}" >/dev/null
fi
# Targets to bundle: the arguments, or every GPU-relevant one that exists.
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  # The list is read whole first: `ninja … | grep -q` under pipefail loses a target whenever grep's early exit
  # makes ninja die of SIGPIPE.
  all=$(ninja -C "$build" -t targets all 2>/dev/null)
  for t in bloomery bloomery-serve test_gpu test_golden; do
    grep -q "^$t:" <<<"$all" && targets+=("$t")
  done
fi
ninja -C "$build" -j2 "${targets[@]}"
rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib"
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$f" ] && strip -o "$bundle/bin/$t" "$f"
done
# Debian libraries the GPU machine's base system lacks (the server's cpp-httplib and its brotli).
for lib in libfmt.so.9 libpcre2-8.so.0 libutf8proc.so.2 libcpp-httplib.so.0.11 libbrotlidec.so.1 \
  libbrotlienc.so.1 libbrotlicommon.so.1; do
  [ -e "/usr/lib/x86_64-linux-gnu/$lib" ] && cp -L "/usr/lib/x86_64-linux-gnu/$lib" "$bundle/lib/"
done
du -sh "$bundle"
