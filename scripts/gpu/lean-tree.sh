#!/usr/bin/env bash
# HERE, around a device call: the working tree the GPU machine receives plus the carried bundle must stay under
# 64 MiB. `on` leaves out of the working tree (git sparse-checkout: the index and the commits keep them) the
# trained folders (tests/fixtures/trained, ~23 MB) but the FP4-Local qwen4_exp and its goldens (the card's
# MTP acceptance test and the bench's drafting rows on real text; all of them: trained.sh, pending.sh), and
# the committed bench results (bench/results, ~3.6 MB, never read there); `off` brings them back. Run `off`
# before ctest or any commit that touches them.
#   bash scripts/gpu/lean-tree.sh on|off
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  on) git sparse-checkout set --no-cone '/*' '!/tests/fixtures/trained/' '!/bench/results/' \
    '/tests/fixtures/trained/qwen4_exp-fp4local-csf/' '/tests/fixtures/trained/goldens/qwen4_exp-fp4local-csf.safetensors' ;;
  off) git sparse-checkout disable ;;
  *) echo "usage: $0 on|off" >&2; exit 2 ;;
esac
git ls-files -z | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done | xargs -0 du -cb | tail -1 |
  awk '{printf "tracked files in the working tree: %.1f MiB\n", $1 / 1048576}'
