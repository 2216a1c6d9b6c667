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

// The draft layer's input for the first n queued rows (their next tokens known), its cache rewound to them.
struct CatchUp {
  Tensor hidden;
  std::vector<int32_t> next;
};
CatchUp begin_catch_up(Backend& be, SequenceState& st, int64_t n) {
  const int64_t R = queued(st);
  CatchUp c{queued_rows(be, st, n), std::vector<int32_t>(st.draft_next.begin(), st.draft_next.begin() + n)};
  st.draft_pos = st.pos - R;
  return c;
}

// Drops the first n queued rows, which the draft layer has now run over.
void end_catch_up(SequenceState& st, int64_t n) {
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
}

// One draft pass over every queued row of each state whose next token is known (all of them in one
// Model::draft_batch), the rows then dropped from its queue; logits as asked (DraftEntry::logits). Every
// state must have such rows.
std::vector<ForwardResult> catch_up_all(Model& model, Backend& be, std::span<SequenceState* const> states,
                                        Model::DraftEntry::Logits logits) {
  std::vector<CatchUp> ups;
  for (SequenceState* st : states)
    ups.push_back(begin_catch_up(be, *st, static_cast<int64_t>(st->draft_next.size())));
  std::vector<Model::DraftEntry> entries;
  for (size_t i = 0; i < states.size(); ++i)
    entries.push_back({states[i], ups[i].hidden, ups[i].next, logits});
  std::vector<ForwardResult> r = model.draft_batch(be, entries);
  for (size_t i = 0; i < states.size(); ++i)
    end_catch_up(*states[i], static_cast<int64_t>(ups[i].next.size()));
  return r;
}

// The next draft of a sequence from its last draft row (-1: it stops): the argmax (`id`, picked where the
// logits live) unless p_min asks for the row; the test hook; then the group's choice under TP.
int32_t choose(Backend& be, const Tensor& logits, int32_t id, int64_t pos, int j, const DraftOptions& opt) {
  int32_t d = id;
  if (opt.p_min > 0.0f) {
    // The draft's own confidence: its softmax probability of d (needs the row).
    std::vector<float> row = be.download(logits.slice(logits.rows() - 1, 1));
    d = argmax(row);
    double z = 0.0;
    for (float v : row) z += std::exp(static_cast<double>(v - row[d]));
    if (1.0 / z < opt.p_min) d = -1;
  }
  if (d >= 0 && opt.hook) d = opt.hook(pos, j, d);
  if (opt.agree) d = opt.agree(d);
  return d;
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

ForwardResult draft_catch_up(Model& model, Backend& be, SequenceState& st, Model::DraftEntry::Logits logits) {
  if (st.draft_next.empty()) return ForwardResult{};
  SequenceState* const one[] = {&st};
  return std::move(catch_up_all(model, be, one, logits)[0]);
}

void draft_catch_up_batch(Model& model, Backend& be, std::span<SequenceState* const> states) {
  std::vector<SequenceState*> live;
  for (SequenceState* st : states)
    if (!st->draft_next.empty()) live.push_back(st);
  if (!live.empty()) catch_up_all(model, be, live, Model::DraftEntry::Logits::None);
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
  DraftJob job{&st, pending, k, {}};
  draft_propose_batch(model, be, std::span(&job, 1), opt);
  return job.drafts;
}

void draft_propose_batch(Model& model, Backend& be, std::span<DraftJob> jobs, const DraftOptions& opt) {
  // Each job's catch-up over its queue ending in its pending token, all in one pass.
  std::vector<DraftJob*> live;
  std::vector<SequenceState*> states;
  for (DraftJob& job : jobs) {
    job.drafts.clear();
    if (job.k <= 0 || job.state->draft_rows.empty()) continue;
    job.state->draft_next.push_back(job.pending);
    live.push_back(&job);
    states.push_back(job.state);
  }
  if (live.empty()) return;
  // Each proposal reads only its last row's logits: one head row a sequence, however many rows it caught up.
  std::vector<ForwardResult> r = catch_up_all(model, be, states, Model::DraftEntry::Logits::Last);
  // Then one draft step a pass for every sequence still drafting, its picks in one call.
  for (int j = 0; !live.empty(); ++j) {
    std::vector<int32_t> ids(live.size(), -1);
    if (opt.p_min <= 0.0f) {
      std::vector<Tensor> rows;
      for (const ForwardResult& f : r) rows.push_back(f.logits);
      ids = be.argmax_last_rows(rows);  // on the card only the ids come back
    }
    std::vector<DraftJob*> next_live;
    std::vector<int32_t> next_ids;
    std::vector<Tensor> next_hidden;
    for (size_t i = 0; i < live.size(); ++i) {
      DraftJob& job = *live[i];
      const int32_t d = choose(be, r[i].logits, ids[i], job.state->pos + 1 + j, j, opt);
      if (d < 0) continue;
      job.drafts.push_back(d);
      if (j + 1 == job.k) continue;
      next_live.push_back(&job);
      next_ids.push_back(d);
      next_hidden.push_back(r[i].hidden.slice(r[i].hidden.rows() - 1, 1));
    }
    live = std::move(next_live);
    if (live.empty()) break;
    std::vector<Model::DraftEntry> entries;
    for (size_t i = 0; i < live.size(); ++i)
      entries.push_back({live[i]->state, next_hidden[i], std::span(&next_ids[i], 1)});
    r = model.draft_batch(be, entries);
  }
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
