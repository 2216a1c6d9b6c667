// TpShard: rank-local counts and cuts, and the host-memory collectives of a TP forward.
#include "models/tp_shard.h"

#include <cstring>
#include <string>

#include "parallel/communicator.h"

namespace bloomery {

TpShard::TpShard(const ModelConfig& mc) : rank(mc.tp_rank), size(mc.tp_size), comm(mc.comm) {
  if (size < 1 || rank < 0 || rank >= size)
    raise("E_TP_SIZE", Where{"", "", "--tp"}, "rank in [0, tp)", fmt::format("rank {} of {}", rank, size));
  if (size > 1 && !comm) raise("E_TP_SIZE", Where{"", "", "--tp"}, "a communicator for tp > 1", "none");
}

int64_t TpShard::split(int64_t count, std::string_view what) const {
  if (count % size != 0)
    raise("E_TP_CUT", Where{"config.json", "", std::string(what)}, fmt::format("a multiple of {}", size),
          fmt::format("{} {} cannot be split over {} ranks", count, what, size));
  return count / size;
}

TensorCut TpShard::rows(int64_t n, int64_t unit) const {
  if (!on()) return {};
  const uint64_t len = uint64_t(n * unit);
  return TensorCut::rows({{rank * len, (rank + 1) * len}});
}

TensorCut TpShard::rows_of(std::initializer_list<std::pair<int64_t, int64_t>> base_and_len) const {
  if (!on()) return {};
  TensorCut c{TensorCut::Axis::Rows, {}};
  for (const auto& [base, len] : base_and_len)
    c.ranges.push_back({uint64_t(base + rank * len), uint64_t(base + (rank + 1) * len)});
  return c;
}

TensorCut TpShard::cols(int64_t n, int64_t unit) const {
  if (!on()) return {};
  const uint64_t len = uint64_t(n * unit);
  return TensorCut::cols(rank * len, (rank + 1) * len);
}

void TpShard::all_reduce(Backend& be, Tensor& t, std::string_view what) const {
  if (on()) be.tp_all_reduce(t, *comm, what);
}

Tensor TpShard::gather_cols(Backend& be, const Tensor& local, std::string_view what) const {
  return on() ? be.tp_gather_cols(local, *comm, what) : local;
}

Tensor TpShard::head_logits(Backend& be, const Tensor& x, const Weight& head, bool split,
                            std::string_view what) const {
  Tensor local = be.alloc({x.rows(), head.rows()});
  be.matmul(local, x, head);
  return split ? gather_cols(be, local, what) : local;
}

TpKvHeads tp_kv_heads(const TpShard& tp, int64_t q_heads, int64_t kv_heads) {
  if (!tp.on()) return {kv_heads, 0};
  const int64_t q_local = tp.split(q_heads, "attention heads");
  if (kv_heads % tp.size == 0) return {kv_heads / tp.size, tp.rank * (kv_heads / tp.size)};
  const int64_t group = q_heads / kv_heads;  // q heads per KV head
  if (tp.size % kv_heads != 0 || group % q_local != 0)
    raise("E_TP_CUT", Where{"config.json", "", "num_key_value_heads"},
          fmt::format("KV heads divisible by {} or dividing it", tp.size),
          fmt::format("{} KV heads cannot be split over {} ranks", kv_heads, tp.size));
  return {1, tp.rank * q_local / group};
}

}  // namespace bloomery
