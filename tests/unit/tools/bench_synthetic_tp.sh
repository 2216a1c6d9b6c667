#!/bin/sh
# `bloomery bench --synthetic glm5_next:<tiny config> --tp 2` on CPU ranks, the CLI road of
# synthetic_tp_test.cc: in one process (--tp 2) and one process per rank over loopback TCP (--nodes, each
# process building the same seeded model); every pp and tg row runs with finite logits, the report says
# tp 2 and that its bytes are per rank; --tp 3 is refused by name (E_TP_CUT).
set -eu
bin=$1
. "$(dirname "$0")/../parallel/rank_procs.sh"
cat >"$tmp/tiny.json" <<'JSON'
{"vocab_size": 256, "hidden_size": 64, "num_attention_heads": 4,
 "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "v_head_dim": 16,
 "linear_attn_config": {"num_heads": 4, "head_dim": 16}, "index_n_heads": 4, "index_head_dim": 16,
 "index_topk": 8, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
 "intermediate_size": 64}
JSON
# --layers 4 cuts the built-in 45-layer schedules to the tiny model's 4 layers.
args="--synthetic glm5_next:$tmp/tiny.json --layers 4 -p 8 -n 4 -r 1 -c 1,2 -t 2"
check() {  # $1: the bench's stdout
  grep -q 'tp 2' "$1" || { echo "no 'tp 2' in:"; cat "$1"; exit 1; }
  grep -q 'per rank (tp 2)' "$1" || { echo "bytes not said to be per rank in:"; cat "$1"; exit 1; }
  rows=$(grep -cE '^\| (pp8|tg4) ' "$1")
  [ "$rows" -eq 4 ] || { echo "expected 4 rows, found $rows:"; cat "$1"; exit 1; }
  if grep -q 'NON-FINITE' "$1"; then cat "$1"; exit 1; fi
}
"$bin" bench $args --tp 2 >"$tmp/local.txt" 2>"$tmp/local.err" || { cat "$tmp/local.err"; exit 1; }
check "$tmp/local.txt"

if "$bin" bench $args --tp 3 >"$tmp/tp3.txt" 2>&1; then
  echo "--tp 3 was not refused:"; cat "$tmp/tp3.txt"; exit 1
fi
grep -q 'E_TP_CUT.*4 MLA heads cannot be split over 3 ranks' "$tmp/tp3.txt" ||
  { echo "--tp 3 not refused by E_TP_CUT:"; cat "$tmp/tp3.txt"; exit 1; }

port=$((21000 + $$ % 9000))
nodes="127.0.0.1:$port,127.0.0.1:$((port + 1))"
"$bin" bench $args --nodes "$nodes" --node-rank 1 >"$tmp/r1.log" 2>&1 &
pids="$!"
"$bin" bench $args --nodes "$nodes" --node-rank 0 >"$tmp/nodes.txt" 2>"$tmp/r0.log" ||
  { cat "$tmp/r0.log" "$tmp/r1.log"; exit 1; }
wait "$pids" || { echo "bench follower exited non-zero"; cat "$tmp/r1.log"; exit 1; }
check "$tmp/nodes.txt"
echo "bench --synthetic --tp: ok"
