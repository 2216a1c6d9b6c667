// Row bookkeeping shared by the families' forward_batch (see batch_rows.h).
#include "models/batch_rows.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "models/spec_state.h"

namespace bloomery {

BatchRows batch_rows(std::span<const Model::BatchEntry> entries, int64_t vocab) {
  BatchRows b;
  b.e.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Model::BatchEntry& en = entries[i];
    if (!en.state) raise("E_BATCH", Where{"", "", "entries"}, "a sequence state per entry", "null");
    for (size_t j = 0; j < i; ++j)
      if (entries[j].state == en.state)
        raise("E_BATCH", Where{"", "", "entries"}, "each sequence once per pass",
              "entries " + std::to_string(j) + " and " + std::to_string(i) + " share a state");
    const int64_t T = static_cast<int64_t>(en.ids.size());
    if (T == 0) raise("E_PROMPT", Where{"", "", "ids"}, "at least one token", "none");
    const SequenceState& st = *en.state;
    if (st.spec.active)
      raise("E_STATE_PENDING", Where{"", "", "entries"}, "a committed state (Model::commit after a verify)",
            "a pending speculative forward of " + std::to_string(st.spec.T) + " rows");
    if (st.pos + T > st.capacity)
      raise("E_CONTEXT_FULL", Where{"", "", "capacity"}, "at most " + std::to_string(st.capacity) + " tokens",
            std::to_string(st.pos + T));
    EntryRows r;
    r.r0 = b.total;
    r.T = T;
    r.p0 = st.pos;
    r.pos.resize(T);
    for (int64_t t = 0; t < T; ++t) r.pos[t] = st.pos + t;
    for (int32_t id : en.ids) {
      if (id < 0 || id >= vocab)
        raise("E_TOKEN_RANGE", Where{"", "", "ids"}, "token ids below " + std::to_string(vocab),
              std::to_string(id));
      b.tok.push_back(id);
    }
    b.total += T;
    b.e.push_back(std::move(r));
  }
  // Every entry passed: the speculative ones start their pending records (spec_state.h).
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].speculative) spec_begin(*entries[i].state, b.e[i].p0, b.e[i].T);
  return b;
}

void batch_advance(std::span<const Model::BatchEntry> entries) {
  for (const Model::BatchEntry& en : entries) {
    en.state->pos += static_cast<int64_t>(en.ids.size());
    en.state->history.insert(en.state->history.end(), en.ids.begin(), en.ids.end());
  }
}

std::vector<ForwardResult> batch_logits(Backend& be, std::span<const Model::BatchEntry> entries,
                                        const BatchRows& b, const Tensor& hidden, const Weight& head,
                                        const std::function<Tensor(const Tensor&)>& head_in,
                                        const std::function<Tensor(const Tensor&)>& head_out) {
  // Which rows want logits: all of an entry's, or its last.
  std::vector<int64_t> n;
  for (size_t i = 0; i < entries.size(); ++i) n.push_back(entries[i].all_logits ? b.e[i].T : 1);
  const Tensor sel = head_rows(be, hidden, b.e, n);
  const int64_t R = sel.rows();
  Tensor x = head_in ? head_in(sel) : sel;
  Tensor logits = be.alloc({R, head.rows()});
  be.matmul(logits, x, head);
  if (head_out) logits = head_out(logits);
  std::vector<ForwardResult> out(entries.size());
  int64_t k = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    out[i].logits = logits.slice(k, n[i]);
    out[i].hidden = hidden.slice(b.e[i].r0, b.e[i].T);
    k += n[i];
  }
  return out;
}

Tensor head_rows(Backend& be, const Tensor& hidden, std::span<const EntryRows> e,
                 std::span<const int64_t> n) {
  int64_t R = 0;
  bool every_row = true;
  for (size_t i = 0; i < e.size(); ++i) {
    R += n[i];
    every_row = every_row && n[i] == e[i].T;
  }
  if (every_row) return hidden;
  Tensor sel = be.alloc({R, hidden.cols()});
  int64_t k = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    if (n[i] == 0) continue;
    Tensor dst = sel.slice(k, n[i]);
    be.copy(dst, hidden.slice(e[i].r0 + e[i].T - n[i], n[i]));
    k += n[i];
  }
  return sel;
}

std::vector<int64_t> draft_head_counts(std::span<const Model::DraftEntry> entries, const DraftRows& d) {
  std::vector<int64_t> n;
  for (size_t i = 0; i < entries.size(); ++i) {
    using L = Model::DraftEntry::Logits;
    const L l = entries[i].logits;
    n.push_back(l == L::All ? d.e[i].T : l == L::Last ? std::min<int64_t>(d.e[i].T, 1) : 0);
  }
  return n;
}

DraftRows draft_rows(Backend& be, std::span<const Model::DraftEntry> entries, int64_t width,
                     std::string_view what, const std::function<int64_t(const SequenceState&)>& cache_rows) {
  DraftRows d;
  d.e.reserve(entries.size());
  for (const Model::DraftEntry& en : entries) {
    const int64_t T = static_cast<int64_t>(en.next_ids.size());
    if (en.hidden.rows() != T || en.hidden.cols() != width)
      backend_shape_error(what, "hidden [" + std::to_string(T) + ", " + std::to_string(width) + "]",
                          en.hidden.shape_str());
    const int64_t p0 = en.state->draft_pos;
    if (p0 + T > cache_rows(*en.state))
      raise("E_CONTEXT_FULL", Where{"", "", "draft tokens"},
            "at most " + std::to_string(cache_rows(*en.state)), std::to_string(p0 + T));
    EntryRows r;
    r.r0 = d.total;
    r.T = T;
    r.p0 = p0;
    for (int64_t t = 0; t < T; ++t) r.pos.push_back(p0 + 1 + t);
    d.tok.insert(d.tok.end(), en.next_ids.begin(), en.next_ids.end());
    d.total += T;
    d.e.push_back(std::move(r));
  }
  if (entries.size() == 1) {
    d.hidden = entries[0].hidden;
    return d;
  }
  d.hidden = be.alloc({d.total, width});
  for (size_t i = 0; i < entries.size(); ++i) {
    Tensor rows = d.hidden.slice(d.e[i].r0, d.e[i].T);
    be.copy(rows, entries[i].hidden);
  }
  return d;
}

std::vector<ForwardResult> draft_results(std::span<const Model::DraftEntry> entries, const DraftRows& d,
                                         const Tensor& hidden, const Tensor& logits) {
  const std::vector<int64_t> n = draft_head_counts(entries, d);
  std::vector<ForwardResult> out(entries.size());
  int64_t k = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i].state->draft_pos += d.e[i].T;
    out[i].hidden = hidden.slice(d.e[i].r0, d.e[i].T);
    if (logits.defined() && n[i] > 0) out[i].logits = logits.slice(k, n[i]);
    k += n[i];
  }
  return out;
}

}  // namespace bloomery
