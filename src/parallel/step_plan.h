// Rank 0 leads, the other ranks follow (design next-capabilities §2.3): before each Engine call rank 0
// broadcasts its step plan (what to run, on which sequences, with which token ids); every other rank runs the
// same call on its own shard of the model and state. Nothing comes back but through the model's collectives,
// so rank 0's results are the group's. Used by LocalTpRanks (threads) and by `bloomery run --nodes`
// (processes over SocketComm) alike.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/engine.h"
#include "runtime/spec_draft.h"

namespace bloomery {

// Every plan starts with a header of four int64 (kind, argument, sequence count, id count), then the
// sequence ids and the token ids. Engine calls (TpLeader) and the server's scheduler steps (TpStepEngine)
// share the one follower loop.
enum TpPlanKind : int64_t {
  kPlanStop,
  kPlanAddSequence,
  kPlanRemoveSequence,
  kPlanPrefill,
  kPlanDecode,
  kPlanNewState,   // arg: the state's id; seqs: {capacity}
  kPlanDropState,  // arg: the state's id
  kPlanForward,    // arg: item count; seqs: {state id, token count, flags} per item; ids: every item's
  kPlanHeartbeat,  // a barrier: a dead or hung rank is found while the server is idle
  kPlanDrafting,   // arg: DraftOptions::Source; seqs: {n_max}. Every rank's step engine drafts from now on
  kPlanDraft,      // arg: job count; seqs: {state id, pending token, k} per job. Batched draft passes (rank 0
                   // picks)
  kPlanCommit,     // arg: the state's id; seqs: {rows kept} after a speculative forward
  kPlanCopyState,  // seqs: {from state id, to state id} (n > 1 choices sharing one prefill)
  kPlanSnapshot,   // arg: the snapshot's id; seqs: {state id} (the prompt cache's prompt-end snapshot)
  kPlanRestore,    // arg: the snapshot's id; seqs: {state id}
  kPlanDropSnapshot,  // arg: the snapshot's id
};
// Every rank's DraftOptions::agree under TP: rank 0's choice of each draft, broadcast to the others.
DraftOptions tp_draft_options(Communicator& comm, DraftOptions options);
// Rank 0's side: the header, then the sequences and ids when there are any.
void send_plan(Communicator& comm, int64_t kind, int64_t arg, std::span<const int64_t> seqs,
               std::span<const int32_t> ids);

class TpLeader {
 public:
  TpLeader(Communicator& comm, Engine& engine) : c_(comm), e_(engine) {}
  SeqId add_sequence(int64_t capacity);
  void remove_sequence(SeqId id);
  std::vector<float> prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits = false);
  std::vector<std::vector<float>> decode(std::span<const SeqId> seqs, std::span<const int32_t> ids);
  // Tells the followers to return from tp_follow.
  void stop();

 private:
  Communicator& c_;
  Engine& e_;
};

// A follower's loop: runs every plan rank 0 sends until it says stop. A step refused before its first
// collective (E_CONTEXT_FULL, E_TOKEN_RANGE) is refused on rank 0 the same way and both carry on; an error
// after a collective, or a collective failure, is thrown (the caller aborts the group).
// `heartbeats`: rank 0 sends a plan at least every half deadline (TpStepEngine's heartbeat), so waiting for
// the next one has the collective deadline too and a stalled rank 0 is named (E_TP_TIMEOUT); without them
// (`bloomery run`, whose rank 0 may sit at a prompt) the wait has none.
void tp_follow(Communicator& comm, Engine& engine, bool heartbeats = false);

}  // namespace bloomery
