// Row bookkeeping for Model::forward_batch, shared by the families: the entries' token rows concatenated into
// one [ΣT, ...] batch, each entry's row range and positions, the checks made before any state changes, and
// the logits step (the rows that want logits go through the head in ONE matmul).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "models/model.h"

namespace bloomery {

// One entry's rows in the batch.
struct EntryRows {
  int64_t r0 = 0, T = 0;     // rows [r0, r0 + T) of the batch
  int64_t p0 = 0;            // the state's position of the first row (state.pos before the pass)
  std::vector<int64_t> pos;  // p0 … p0 + T − 1
};

struct BatchRows {
  std::vector<EntryRows> e;  // in entry order
  std::vector<int64_t> tok;  // every row's token id, entries one after another
  int64_t total = 0;         // ΣT
};

// Checks every entry before anything changes, so a refused batch leaves every state as it was: a state, at
// least one id, ids below `vocab` (E_TOKEN_RANGE), room for T more tokens (E_CONTEXT_FULL), no state twice
// (E_BATCH), no uncommitted speculative forward (E_STATE_PENDING). Then the speculative entries start their
// pending records (models/spec_state.h).
BatchRows batch_rows(std::span<const Model::BatchEntry> entries, int64_t vocab);

// After the pass: every entry's state moves past its ids (pos, history).
void batch_advance(std::span<const Model::BatchEntry> entries);

// The results of a pass from hidden [ΣT, C]: each entry's hidden is its rows of `hidden` (a view); its
// logits are those of all its rows or the last one. The chosen rows are gathered, mapped by `head_in` (the
// final hyper-connection read; empty: identity) and multiplied by `head` in one matmul, then sliced per
// entry. `head_out` maps the logits before the split (a vocabulary-split head's all-gather).
std::vector<ForwardResult> batch_logits(Backend& be, std::span<const Model::BatchEntry> entries,
                                        const BatchRows& b, const Tensor& hidden, const Weight& head,
                                        const std::function<Tensor(const Tensor&)>& head_in = {},
                                        const std::function<Tensor(const Tensor&)>& head_out = {});

// A batched draft pass's rows (Model::draft_batch): every entry's hidden stacked into one tensor (the entry's
// own when there is one), its next ids, and its rows with p0 = its draft_pos and the draft positions
// p0 + 1 … p0 + T (the draft layer sits one position ahead of the target). Checked before anything changes:
// the hidden's shape [T, width] (T = its ids) and room for T more rows in the draft cache (`cache_rows` of
// the state; E_CONTEXT_FULL). `what` names the family's draft in the errors.
struct DraftRows {
  std::vector<EntryRows> e;
  std::vector<int64_t> tok;
  Tensor hidden;
  int64_t total = 0;
};
DraftRows draft_rows(Backend& be, std::span<const Model::DraftEntry> entries, int64_t width,
                     std::string_view what, const std::function<int64_t(const SequenceState&)>& cache_rows);

// The rows of `hidden` that go through a head: the last n[i] rows of each entry's range e[i], stacked;
// `hidden` itself (no copy) when that is every row.
Tensor head_rows(Backend& be, const Tensor& hidden, std::span<const EntryRows> e, std::span<const int64_t> n);

// How many of each draft entry's rows go through the head (DraftEntry::logits: none, its last, all), so that
// a proposal's catch-up over several rows makes one head row, not one a row. All zero: the pass skips the
// head.
std::vector<int64_t> draft_head_counts(std::span<const Model::DraftEntry> entries, const DraftRows& d);

// After a draft pass: every entry's draft_pos moves past its rows, and its result is its rows of the pass's
// hidden (a view) and its head rows of `logits` (the rows head_rows took with draft_head_counts, in entry
// order; none when `logits` is undefined or the entry wanted none).
std::vector<ForwardResult> draft_results(std::span<const Model::DraftEntry> entries, const DraftRows& d,
                                         const Tensor& hidden, const Tensor& logits);

}  // namespace bloomery
