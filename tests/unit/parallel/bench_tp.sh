#!/bin/sh
# `bloomery bench --tp N` on CPU ranks: in one process (--tp 2) and one process per rank over loopback TCP
# (--nodes): every pp and tg row runs through the ranks with finite logits, and --json says tp 2.
set -eu
bin=$1
fixture=$2
. "$(dirname "$0")/rank_procs.sh"
args="-m $fixture -p 16 -n 8 -r 2 -d 0,8 -c 1,2 -t 2"
check() {  # $1: the bench's stdout
  grep -q 'tp 2' "$1" || { echo "no 'tp 2' in:"; cat "$1"; exit 1; }
  rows=$(grep -cE '^\| (pp16|tg8) ' "$1")
  [ "$rows" -eq 8 ] || { echo "expected 8 rows, found $rows:"; cat "$1"; exit 1; }
  if grep -q 'NON-FINITE' "$1"; then cat "$1"; exit 1; fi
}
"$bin" bench $args --tp 2 >"$tmp/local.txt" 2>"$tmp/local.err" || { cat "$tmp/local.err"; exit 1; }
check "$tmp/local.txt"
"$bin" bench $args --tp 2 --json 2>/dev/null | grep -q '"tp": 2' || { echo "--json lacks tp 2"; exit 1; }

port=$((21000 + $$ % 9000))
nodes="127.0.0.1:$port,127.0.0.1:$((port + 1))"
"$bin" bench $args --nodes "$nodes" --node-rank 1 >"$tmp/r1.log" 2>&1 &
pids="$!"
"$bin" bench $args --nodes "$nodes" --node-rank 0 >"$tmp/nodes.txt" 2>"$tmp/r0.log" ||
  { cat "$tmp/r0.log" "$tmp/r1.log"; exit 1; }
wait "$pids" || { echo "bench follower exited non-zero"; cat "$tmp/r1.log"; exit 1; }
check "$tmp/nodes.txt"
echo "bench --tp: ok"
