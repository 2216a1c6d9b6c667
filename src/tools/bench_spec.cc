// The speculative-decoding rows of `bloomery bench` (see bench_spec.h).
#include "tools/bench_spec.h"

#include <chrono>
#include <vector>

#include "core/error.h"
#include "models/forward_step.h"
#include "runtime/spec_draft.h"

namespace bloomery::tools {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

VerifyTiming time_verify(Backend& be, Model& m, const BenchHooks& h, SequenceState& st,
                         std::span<const int32_t> ids) {
  const StateCheckpoint cp = m.checkpoint(be, st);
  const uint64_t replays = h.graph_replays ? h.graph_replays() : 0;
  VerifyTiming t;
  h.sync();
  const auto t0 = Clock::now();
  // As ModelStepEngine::forward builds a verify item: every row's logits, speculative.
  const Model::BatchEntry e{&st, ids, true, true};
  ForwardResult r = std::move(forward_step(m, be, std::span(&e, 1))[0]);
  std::vector<Tensor> rows;
  for (int64_t j = 0; j < r.logits.rows(); ++j) rows.push_back(r.logits.slice(j, 1));
  (void)h.greedy(rows);  // the ids are on the host: the forward is complete
  const auto t1 = Clock::now();
  // ModelStepEngine::commit with the first draft rejected: the pending token's row stays, and its hidden
  // joins the draft queue (bookkeeping only, no compute).
  m.commit(be, st, 1);
  if (m.info().has_draft) draft_feed(m, be, st, r.hidden.slice(0, 1), ids.first(1), false);
  h.sync();
  t.ms = ms_since(t0);
  t.rollback_ms = ms_since(t1);
  t.replayed = h.graph_replays && h.graph_replays() > replays;
  for (const Tensor& row : rows) t.finite = t.finite && last_row_finite(be, row);
  m.restore(be, st, cp);
  return t;
}

void draft_ready(Backend& be, Model& m, SequenceState& st) {
  draft_catch_up(m, be, st);
  if (st.draft_rows.empty() || st.draft_pos != st.pos - 1)
    raise("E_BENCH_STATE", Where{"", "", "draft queue"},
          "one target row waiting at position " + std::to_string(st.pos - 1),
          st.draft_rows.empty() ? "an empty queue" : "draft position " + std::to_string(st.draft_pos));
}

VerifyTiming time_draft(Backend& be, Model& m, const BenchHooks& h, SequenceState& st, int32_t pending) {
  const Tensor& last = st.draft_rows.back();
  const Tensor hidden = last.slice(last.rows() - 1, 1);
  const int64_t p0 = st.draft_pos;
  const uint64_t replays = h.graph_replays ? h.graph_replays() : 0;
  VerifyTiming t;
  h.sync();
  const auto t0 = Clock::now();
  ForwardResult r = m.draft(be, st, hidden, std::span(&pending, 1));
  (void)h.greedy(std::span(&r.logits, 1));
  h.sync();
  t.ms = ms_since(t0);
  t.replayed = h.graph_replays && h.graph_replays() > replays;
  st.draft_pos = p0;
  t.finite = last_row_finite(be, r.logits);
  return t;
}

}  // namespace bloomery::tools
