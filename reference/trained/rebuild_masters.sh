#!/usr/bin/env bash
# Rebuilds every family's trained master (OUT_DIR/master-<family>.npz, train.py --save-master's format) from
# the committed BF16 folders and training histories, with numpy only (reference/trained/master_from_folder.py).
# The masters are not committed: the BF16 folder holds them bit for bit. Prints OUT_DIR (absolute), so
#   FROM_MASTER_DIR=$(bash reference/trained/rebuild_masters.sh /tmp/masters) LAYOUTS=... bash reference/make_trained.sh OUT
set -euo pipefail
out=$(mkdir -p "${1:?usage: rebuild_masters.sh OUT_DIR}" && cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tr=$root/tests/fixtures/trained
cd "$root/reference"
for fam in qwen3_next qwen4_exp glm5_next; do
  log=$tr/logs/$fam.log
  [ -f "$log" ] || log=$tr/logs/$fam.hist.json
  ${PYTHON:-python3} -m trained.master_from_folder "$fam" "$tr/$fam-bf16" "$log" "$out/master-$fam.npz" >&2
done
echo "$out"
