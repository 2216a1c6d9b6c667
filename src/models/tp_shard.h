// A family's view of tensor parallelism (models.md §2.7, §3.12, §4.12): how many heads / channels this rank
// owns (refusing a world size the shapes do not divide, by name, before anything loads), the cuts of its
// declarations, and the two collectives a forward needs: the sum of row-parallel partials and the all-gather
// of a vocabulary-split head's logits. With tp_size 1 every cut is whole and every collective does nothing.
//
// The collectives run through the backend, which reduces where its tensors live (Backend::tp_all_reduce).
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/backend.h"
#include "formats/weight_slice.h"
#include "models/model.h"

namespace bloomery {

struct TpShard {
  int rank = 0, size = 1;
  Communicator* comm = nullptr;

  explicit TpShard(const ModelConfig& mc);
  bool on() const { return size > 1; }

  // count / size; E_TP_CUT ("3 MLA heads cannot be split over 2 ranks") when size does not divide it.
  int64_t split(int64_t count, std::string_view what) const;
  // This rank's block [rank·n·unit, (rank+1)·n·unit) of rows (whole when size is 1).
  TensorCut rows(int64_t n, int64_t unit = 1) const;
  // Several such blocks, one per (base, n·unit) part (GDN's q, k and v channels).
  TensorCut rows_of(std::initializer_list<std::pair<int64_t, int64_t>> base_and_len) const;
  // This rank's block of columns (a row-parallel projection's input).
  TensorCut cols(int64_t n, int64_t unit = 1) const;

  // t ← Σ over ranks (rank order), in place, through the backend (Backend::tp_all_reduce). Nothing when
  // size is 1.
  void all_reduce(Backend& be, Tensor& t, std::string_view what) const;
  // [R, n] on every rank → [R, size·n], rank r's columns at [r·n, (r+1)·n).
  Tensor gather_cols(Backend& be, const Tensor& local, std::string_view what) const;
  // x · headᵀ → [R, vocabulary]: a head cut by vocabulary rows (`split`: its rows are this rank's share)
  // gives this rank's columns, then every rank's are gathered in rank order. The draft layers' heads.
  Tensor head_logits(Backend& be, const Tensor& x, const Weight& head, bool split,
                     std::string_view what) const;
};

// KV heads under TP (attention by KV head): size divides Hkv → Hkv/size heads each; else each rank keeps the
// one KV head its q heads use (replicated over size/Hkv ranks). Refuses any other split with E_TP_CUT.
struct TpKvHeads {
  int64_t local = 0;  // KV heads this rank keeps
  int64_t first = 0;  // the first of them
};
TpKvHeads tp_kv_heads(const TpShard& tp, int64_t q_heads, int64_t kv_heads);

}  // namespace bloomery
