// The speculative-decoding rows of `bloomery bench` (--spec-rows): what one MTP verify and one draft step
// cost at a C = 1 decode's depth. bench_core.cc runs them between the repeats of the C = 1 tg row, on its
// sequence, so that both see the same conditions. Each follows the scheduler's calls (runtime/scheduler.cc,
// runtime/spec_draft.cc):
//   verifyK: the pending token and K − 1 drafts as one speculative entry with every row's logits, through
//     forward_step (a graph step when K ≤ kStepGraphMaxTokens), the K greedy ids, then Model::commit(1): all
//     drafts rejected, the round whose rollback replays the recurrent parts over the kept row (timed and
//     reported apart; a round that keeps every row only swaps handles). A checkpoint taken before and
//     restored after (both untimed) puts the sequence back at its depth, so the next tg step is the one it
//     would have been without the verify.
//   draft: one Model::draft step of one row (T = 1), the target's last hidden and the pending token, and its
//     greedy id: draft_propose's first step after a plain decode. The scheduler brackets no draft call as a
//     step, so it is eager on CUDA too.
// Sampling is the bench's greedy hook, as for the tg rows (on the card for CUDA, only the ids come back); the
// scheduler today downloads every verify row and the draft row to the host instead.
#pragma once

#include <cstdint>
#include <span>

#include "tools/bench_core.h"

namespace bloomery::tools {

struct VerifyTiming {
  double ms = 0;           // forward + greedy ids + commit(1), synchronised
  double rollback_ms = 0;  // the commit(1) part of ms
  bool replayed = false;   // the backend replayed the step as a captured graph (BenchHooks::graph_replays)
  bool finite = true;      // every verify row's logits were finite
};

// One verify of ids.size() rows at st.pos, rolled back to st.pos (see above).
VerifyTiming time_verify(Backend& be, Model& m, const BenchHooks& h, SequenceState& st,
                         std::span<const int32_t> ids);

// Untimed, before draft steps: the draft layer catches up over the target rows the tg steps queued
// (SequenceState::draft_rows), so that one row waits for the pending token, as after a plain decode.
void draft_ready(Backend& be, Model& m, SequenceState& st);

// One draft step for `pending` from the queued row, as the scheduler drafts (eager: a draft pass as a graph
// step measured slower, docs/performance.md); the draft position is rewound after it (positional: the next
// step writes the same cache row again). `replayed` says whether the backend replayed a graph; rollback_ms
// stays 0.
VerifyTiming time_draft(Backend& be, Model& m, const BenchHooks& h, SequenceState& st, int32_t pending);

}  // namespace bloomery::tools
