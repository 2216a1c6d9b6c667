#!/usr/bin/env bash
# Installs every Debian package bloomery needs to build and test. Idempotent: a second run changes nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcpp-httplib-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev libfmt-dev libcli11-dev
  googletest libgtest-dev
  python3 python3-numpy python3-jinja2
  clang clang-format libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm: only the e2e client tests need them; a machine with node from another source keeps it.
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: CUDA found at /usr/local/cuda ($(/usr/local/cuda/bin/nvcc --version | tail -1))"
else
  echo "install-deps: no CUDA toolkit at /usr/local/cuda; the CPU-only build will be used"
fi
