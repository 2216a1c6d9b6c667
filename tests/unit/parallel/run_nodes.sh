#!/bin/sh
# `bloomery run --nodes host:port,… --node-rank R`: one process per rank over loopback TCP.
#  1. Two processes give the greedy ids of one process.
#  2. A follower killed mid-decode (SIGKILL) is named by rank 0, which exits non-zero (E_TP_RANK_FAILED).
#  3. A follower stalled mid-decode (SIGSTOP) is named by rank 0 within --collective-timeout-ms
#     (E_TP_TIMEOUT), which exits non-zero.
set -eu
bin=$1
fixture=$2
. "$(dirname "$0")/rank_procs.sh"
port=$((20000 + $$ % 9000))
ids="--prompt-ids 3,17,42,99,7"

one=$("$bin" run -m "$fixture" $ids -n 10 --print-ids --no-progress 2>/dev/null | grep '^ids:')

nodes="127.0.0.1:$port,127.0.0.1:$((port + 1))"
"$bin" run -m "$fixture" --no-progress --nodes "$nodes" --node-rank 1 >"$tmp/r1.log" 2>&1 &
pids="$!"
two=$("$bin" run -m "$fixture" $ids -n 10 --print-ids --no-progress --nodes "$nodes" --node-rank 0 2>"$tmp/r0.log" |
      grep '^ids:') || { cat "$tmp/r0.log" "$tmp/r1.log"; exit 1; }
wait "$pids" || { echo "follower exited non-zero"; cat "$tmp/r1.log"; exit 1; }
[ "$two" = "$one" ] || { echo "2 processes: $two, 1 process: $one"; exit 1; }

# Faults: rank 0 decodes for a long time; the follower is killed or stopped once decoding runs.
fault() {  # $1: signal, $2: port, $3: the E_ id rank 0 must print
  nodes="127.0.0.1:$2,127.0.0.1:$(($2 + 1))"
  "$bin" run -m "$fixture" --no-progress --nodes "$nodes" --node-rank 1 --collective-timeout-ms 800 \
    >"$tmp/f1.log" 2>&1 &
  follower=$!
  pids="$pids $follower"
  start=$(date +%s)
  "$bin" run -m "$fixture" $ids -n 20000 --ignore-eos --no-progress --nodes "$nodes" --node-rank 0 \
    --collective-timeout-ms 800 >/dev/null 2>"$tmp/f0.log" &
  leader=$!
  sleep 1.5
  kill -"$1" "$follower"
  if wait "$leader"; then echo "rank 0 finished despite SIG$1 on rank 1"; exit 1; fi
  took=$(($(date +%s) - start))
  grep -q "$3" "$tmp/f0.log" || { echo "SIG$1: rank 0 said:"; cat "$tmp/f0.log"; exit 1; }
  grep -q "rank 1" "$tmp/f0.log" || { echo "SIG$1: rank 1 not named:"; cat "$tmp/f0.log"; exit 1; }
  [ "$took" -lt 20 ] || { echo "SIG$1: took $took s"; exit 1; }
  kill -9 "$follower" 2>/dev/null || true
  grep E_TP "$tmp/f0.log"
}
fault KILL $((port + 2)) E_TP_RANK_FAILED
fault STOP $((port + 4)) E_TP_TIMEOUT
echo "run --nodes: ok ($one)"
