// MTP drafting over a Model's own draft layer (Model::draft), per sequence: the target hiddens each forward
// produced are queued on the state (SequenceState::draft_rows / draft_next) until the token after each row is
// known, then the draft layer catches up over them; propose() turns the queue plus the pending token into up
// to k greedy drafts. The verify and the acceptance are the scheduler's (runtime/scheduler.cc).
//
// Positions: the draft layer's pair j is (target hidden at j, token j + 1) and predicts token j + 2. Before a
// catch-up, draft_pos is rewound to the first queued row, so the draft cache rows the last round wrote from
// its own (speculative) hiddens are written again from the target's.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "models/model.h"

namespace bloomery {

struct DraftOptions {
  // Where drafts come from: the model's MTP/NextN layer, or n-gram lookup in the sequence's own tokens
  // (llama.cpp's lookup decoding, --spec-type ngram-simple: no draft layer, no draft state).
  enum class Source { Mtp, Ngram } source = Source::Mtp;
  int ngram_max = 4;  // Ngram: the longest suffix looked up (then shorter ones, down to ngram_min)
  int ngram_min = 1;
  int n_max = 3;  // most drafts per round (1 … 8)
  // A one-token decode row the draft layer has not run over waits in the sequence's queue until it holds
  // this many such rows (ModelStepEngine::catch_up_drafts); the next proposal's catch-up runs over the whole
  // queue in its one pass (draft_propose_batch). So a slot that is not drafting (adaptive width 0) runs the
  // draft layer once every probe or every defer_rows tokens, not every step, and a request that ends
  // without drafting again never runs it for those rows. 0: every step, as the rows come. The bound keeps
  // the queued hiddens (a step's batch hidden each) few.
  int defer_rows = 32;
  float p_min = 0.0f;  // stop drafting when the draft's top probability falls below this
  // Test hook: the draft at position `pos` (the j-th of its round, 0-based) may be replaced (to force accepts
  // or rejects). Called before the draft is fed to the next draft step.
  std::function<int32_t(int64_t pos, int j, int32_t draft)> hook;
  // Tensor parallel: every rank runs the draft layer (its collectives) and rank 0 decides. Called with this
  // rank's choice for each draft (-1: stop drafting), it returns the group's (rank 0's, broadcast), which
  // every rank then feeds to its next draft step. Unset: this rank decides alone.
  std::function<int32_t(int32_t draft)> agree;
};

// After a forward of `ids` whose hiddens are `hidden` [T, draft_hidden_size] (committed rows only): queues
// the rows; with catch_up, runs the draft layer over every queued row whose next token is now known.
void draft_feed(Model& model, Backend& be, SequenceState& st, const Tensor& hidden,
                std::span<const int32_t> ids, bool catch_up);

// Runs the draft layer over every queued row whose next token is known (what draft_feed does with
// catch_up), leaving only the row that waits for the pending token. Returns the pass's hidden, and its logits
// only as asked: a catch-up reads nothing but the draft layer's caches, so by default the head is skipped.
ForwardResult draft_catch_up(Model& model, Backend& be, SequenceState& st,
                             Model::DraftEntry::Logits logits = Model::DraftEntry::Logits::None);

// draft_catch_up for several sequences in one Model::draft_batch pass without logits (states with nothing
// known are left alone): a batch of decoding slots that are not drafting this round runs the draft layer once
// for all of them instead of once each, as the draft step itself does (draft_propose_batch).
void draft_catch_up_batch(Model& model, Backend& be, std::span<SequenceState* const> states);

// Up to `k` greedy drafts for the positions after `pending` (the sampled token not yet fed, at st.pos): the
// catch-up over the queue ends in `pending`, then k − 1 draft steps on the draft layer's own hidden.
std::vector<int32_t> draft_propose(Model& model, Backend& be, SequenceState& st, int32_t pending, int k,
                                   const DraftOptions& opt);

// Several sequences' proposals at once (one per job, as draft_propose gives each alone): the catch-ups of all
// in one Model::draft_batch pass, then each further draft step of every sequence still drafting in one pass,
// and each step's picks in one call, so the draft layer's weights are read once per step for all of them.
// Under TP, DraftOptions::agree is called job by job in order at every step, the same on every rank.
struct DraftJob {
  SequenceState* state = nullptr;
  int32_t pending = 0;
  int k = 0;
  std::vector<int32_t> drafts;  // out
};
void draft_propose_batch(Model& model, Backend& be, std::span<DraftJob> jobs, const DraftOptions& opt);

// N-gram lookup: the tokens that followed the latest earlier occurrence of the context's last n tokens
// (n from ngram_max down to ngram_min, the longest match wins), at most k of them. `context` ends with the
// pending token.
std::vector<int32_t> ngram_propose(std::span<const int32_t> context, int k, int ngram_max, int ngram_min);

}  // namespace bloomery
