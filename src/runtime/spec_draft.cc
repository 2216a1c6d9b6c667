// MTP drafting: the draft queue and the greedy proposal (spec_draft.h).
#include "runtime/spec_draft.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/sampler.h"

namespace bloomery {

namespace {

// The queued rows [0, n) as one tensor.
Tensor queued_rows(Backend& be, const SequenceState& st, int64_t n) {
  if (st.draft_rows.size() == 1 && st.draft_rows[0].rows() == n) return st.draft_rows[0];
  Tensor h = be.alloc({n, st.draft_rows.at(0).cols()});
  int64_t r = 0;
  for (const Tensor& t : st.draft_rows) {
    const int64_t take = std::min(t.rows(), n - r);
    if (take <= 0) break;
    Tensor dst = h.slice(r, take);
    be.copy(dst, t.slice(0, take));
    r += take;
  }
  return h;
}

int64_t queued(const SequenceState& st) {
  int64_t n = 0;
  for (const Tensor& t : st.draft_rows) n += t.rows();
  return n;
}

// Runs the draft layer over the first n queued rows (their next tokens known) and drops them from the queue.
ForwardResult catch_up(Model& model, Backend& be, SequenceState& st, int64_t n) {
  const int64_t R = queued(st);
  Tensor h = queued_rows(be, st, n);
  st.draft_pos = st.pos - R;
  const std::vector<int32_t> next(st.draft_next.begin(), st.draft_next.begin() + n);
  ForwardResult r = model.draft(be, st, h, next);
  // Keep the rows past n (at most the last one, whose next token is still unknown).
  std::vector<Tensor> rest;
  int64_t skip = n;
  for (const Tensor& t : st.draft_rows) {
    if (skip >= t.rows()) {
      skip -= t.rows();
      continue;
    }
    rest.push_back(t.slice(skip, t.rows() - skip));
    skip = 0;
  }
  st.draft_rows = std::move(rest);
  st.draft_next.erase(st.draft_next.begin(), st.draft_next.begin() + n);
  return r;
}

}  // namespace

void draft_feed(Model& model, Backend& be, SequenceState& st, const Tensor& hidden,
                std::span<const int32_t> ids, bool catch_up_now) {
  if (ids.empty()) return;
  if (!st.draft_rows.empty()) st.draft_next.push_back(ids[0]);  // the last queued row's next token
  st.draft_rows.push_back(hidden);
  st.draft_next.insert(st.draft_next.end(), ids.begin() + 1, ids.end());
  if (catch_up_now) draft_catch_up(model, be, st);
}

void draft_catch_up(Model& model, Backend& be, SequenceState& st) {
  const int64_t known = static_cast<int64_t>(st.draft_next.size());
  if (known > 0) catch_up(model, be, st, known);
}

std::vector<int32_t> draft_propose(Model& model, Backend& be, SequenceState& st, int32_t pending, int k,
                                   const DraftOptions& opt) {
  std::vector<int32_t> out;
  if (opt.source == DraftOptions::Source::Ngram) {
    std::vector<int32_t> ctx = st.history;
    ctx.push_back(pending);
    out = ngram_propose(ctx, k, opt.ngram_max, opt.ngram_min);
    if (opt.hook)
      for (size_t j = 0; j < out.size(); ++j)
        out[j] = opt.hook(st.pos + 1 + static_cast<int64_t>(j), static_cast<int>(j), out[j]);
    return out;
  }
  if (k <= 0 || st.draft_rows.empty()) return out;
  st.draft_next.push_back(pending);
  ForwardResult r = catch_up(model, be, st, static_cast<int64_t>(st.draft_next.size()));
  for (int j = 0; j < k; ++j) {
    const int64_t T = r.logits.rows();
    int32_t d = -1;
    if (opt.p_min > 0.0f) {
      // The draft's own confidence: its softmax probability of d (needs the row).
      std::vector<float> row = be.download(r.logits.slice(T - 1, 1));
      d = argmax(row);
      double z = 0.0;
      for (float v : row) z += std::exp(static_cast<double>(v - row[d]));
      if (1.0 / z < opt.p_min) d = -1;
    } else {
      d = be.argmax_last_rows(std::span(&r.logits, 1))[0];  // on the card only the id comes back
    }
    if (d >= 0 && opt.hook) d = opt.hook(st.pos + 1 + j, j, d);
    if (opt.agree) d = opt.agree(d);
    if (d < 0) break;
    out.push_back(d);
    if (j + 1 == k) break;
    const int32_t id = d;
    r = model.draft(be, st, r.hidden.slice(T - 1, 1), std::span(&id, 1));
  }
  return out;
}

std::vector<int32_t> ngram_propose(std::span<const int32_t> ctx, int k, int ngram_max, int ngram_min) {
  std::vector<int32_t> out;
  const int64_t L = static_cast<int64_t>(ctx.size());
  for (int64_t n = std::min<int64_t>(ngram_max, L - 1); n >= std::max(1, ngram_min) && out.empty(); --n) {
    const auto suffix = ctx.subspan(static_cast<size_t>(L - n));
    // Latest earlier occurrence: a start s < L − n whose n tokens equal the suffix.
    for (int64_t s = L - n - 1; s >= 0; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), ctx.begin() + s)) continue;
      for (int64_t j = s + n; j < L && static_cast<int>(out.size()) < k; ++j) out.push_back(ctx[j]);
      break;
    }
  }
  return out;
}

}  // namespace bloomery
