#!/bin/sh
# The trained folders are remade by their one command: the masters rebuilt from the committed BF16 folders
# (reference/trained/rebuild_masters.sh) and exported again with the fixtures' writers
# (reference/trained/export_master.py, numpy only) give every committed trained folder byte for byte.
#   check_trained_export.sh SOURCE_DIR WORK_DIR
set -eu
src=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
[ -d "$src/tests/fixtures/trained" ] || exit 77
masters=$(PYTHON=/usr/bin/python3 bash "$src/reference/trained/rebuild_masters.sh" "$work/masters")
cd "$src/reference"
status=0
for fam in qwen3_next qwen4_exp glm5_next; do
  /usr/bin/python3 -m trained.export_master "$masters/master-$fam.npz" "$src/tests/fixtures/trained/$fam-bf16/tokenizer.json" \
    "$work/out" --config-templates "$src/tests/fixtures/models" > "$work/export-$fam.log" 2>&1 ||
    { echo "FAIL export of $fam:"; cat "$work/export-$fam.log"; status=1; continue; }
  for committed in "$src"/tests/fixtures/trained/$fam-*; do
    name=$(basename "$committed")
    made=$work/out/tests/fixtures/models/$name
    if [ ! -d "$made" ]; then echo "FAIL $name: committed, not exported"; status=1; continue; fi
    if diff -r "$committed" "$made" > "$work/diff-$name.txt"; then
      echo "PASS $name: the export is the committed folder, byte for byte"
    else
      echo "FAIL $name differs from its export:"; head -5 "$work/diff-$name.txt"; status=1
    fi
  done
done
exit $status
