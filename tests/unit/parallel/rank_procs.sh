# Sourced by the multi-process rank tests: a scratch folder and the rank processes they start ($pids, each
# appended after `&`), all removed / killed when the test exits, however it exits.
tmp=$(mktemp -d)
pids=""
cleanup() {
  for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
