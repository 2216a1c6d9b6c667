#!/bin/sh
# `bloomery run --tp N` (CPU ranks in one process): greedy ids equal --tp 1's, with MTP drafting too; a world size the fixture's
# heads do not divide exits non-zero naming the cut (E_TP_CUT).
set -eu
bin=$1
fixture=$2
one=$("$bin" run -m "$fixture" --prompt-ids 3,17,42,99,7 -n 10 --print-ids --no-progress --tp 1 2>/dev/null | grep '^ids:')
for tp in 2 4; do
  got=$("$bin" run -m "$fixture" --prompt-ids 3,17,42,99,7 -n 10 --print-ids --no-progress --tp "$tp" 2>/dev/null | grep '^ids:')
  [ "$got" = "$one" ] || { echo "tp $tp: $got, tp 1: $one"; exit 1; }
done
# Drafting under TP: every rank runs the draft layer on its shard, the ids stay --tp 1's without drafting.
got=$("$bin" run -m "$fixture" --prompt-ids 3,17,42,99,7 -n 10 --print-ids --no-progress --tp 2 --spec-type draft-mtp 2>/dev/null | grep '^ids:')
[ "$got" = "$one" ] || { echo "tp 2 drafting: $got, tp 1: $one"; exit 1; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT
if "$bin" run -m "$fixture" --prompt-ids 3,17 -n 2 --no-progress --tp 3 >/dev/null 2>"$err"; then
  echo "tp 3 was accepted"; exit 1
fi
grep -q 'E_TP_CUT.*4 MLA heads cannot be split over 3 ranks' "$err" || { cat "$err"; exit 1; }
echo "run --tp: ok ($one)"
