// Step plans: a header of four int64 (kind, argument, sequence count, id count), then the sequence ids and
// the token ids, each one broadcast from rank 0.
#include "parallel/step_plan.h"

#include <map>
#include <memory>

#include "core/error.h"
#include "runtime/scheduler.h"

namespace bloomery {

void send_plan(Communicator& c, int64_t kind, int64_t arg, std::span<const int64_t> seqs,
               std::span<const int32_t> ids) {
  int64_t head[4] = {kind, arg, int64_t(seqs.size()), int64_t(ids.size())};
  c.broadcast(head, sizeof(head), 0, "step plan");
  if (!seqs.empty())
    c.broadcast(const_cast<int64_t*>(seqs.data()), seqs.size() * sizeof(int64_t), 0, "step plan sequences");
  if (!ids.empty())
    c.broadcast(const_cast<int32_t*>(ids.data()), ids.size() * sizeof(int32_t), 0, "step plan ids");
}

SeqId TpLeader::add_sequence(int64_t capacity) {
  send_plan(c_, kPlanAddSequence, capacity, {}, {});
  return e_.add_sequence(capacity);
}

void TpLeader::remove_sequence(SeqId id) {
  send_plan(c_, kPlanRemoveSequence, id, {}, {});
  e_.remove_sequence(id);
}

std::vector<float> TpLeader::prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits) {
  const SeqId one[1] = {seq};
  send_plan(c_, kPlanPrefill, all_logits ? 1 : 0, one, ids);
  return e_.prefill(seq, ids, all_logits);
}

std::vector<std::vector<float>> TpLeader::decode(std::span<const SeqId> seqs, std::span<const int32_t> ids) {
  send_plan(c_, kPlanDecode, 0, seqs, ids);
  return e_.decode(seqs, ids);
}

DraftOptions tp_draft_options(Communicator& comm, DraftOptions options) {
  options.agree = [&comm](int32_t draft) {
    comm.broadcast(&draft, sizeof(draft), 0, "draft id");
    return draft;
  };
  return options;
}

void TpLeader::stop() {
  send_plan(c_, kPlanStop, 0, {}, {});
}

namespace {

// A follower's copy of the server's sequence states, keyed by rank 0's ids, and the step engine that runs
// rank 0's scheduler steps on them.
struct FollowerStates {
  ModelStepEngine steps;
  std::map<int64_t, std::unique_ptr<SequenceState>> states;
  std::map<int64_t, std::unique_ptr<StateCheckpoint>> snapshots;

  // Rank 0's drafts: this rank runs the same draft steps, and its choices give way to rank 0's (agree).
  void enable_drafting(Communicator& c, int64_t source, int64_t n_max) {
    DraftOptions d;
    d.source = source == int64_t(DraftOptions::Source::Ngram) ? DraftOptions::Source::Ngram
                                                              : DraftOptions::Source::Mtp;
    d.n_max = static_cast<int>(n_max);
    steps.enable_drafting(tp_draft_options(c, d));
  }

  void forward(int64_t n, std::span<const int64_t> meta, std::span<const int32_t> ids) {
    std::vector<StepItem> items(static_cast<size_t>(n));
    size_t off = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const int64_t len = meta[3 * i + 1], flags = meta[3 * i + 2];
      items[i].state = states.at(meta[3 * i]).get();
      items[i].ids = ids.subspan(off, static_cast<size_t>(len));
      items[i].want_logits = flags & 1;
      items[i].speculative = flags & 2;
      off += static_cast<size_t>(len);
    }
    // Item errors are rank 0's too (the same checks on the same states); a collective failure is not
    // caught by the step engine's per-item handling, so it surfaces here.
    steps.forward(items);
    for (const StepItem& it : items)
      if (it.error.find("E_TP_") != std::string::npos)
        raise("E_TP_RANK_FAILED", Where{"", "", "step"}, "a step every rank finished", it.error);
  }
};

}  // namespace

void tp_follow(Communicator& c, Engine& engine, bool heartbeats) {
  FollowerStates server{ModelStepEngine(engine.model(), engine.backend()), {}};
  for (;;) {
    int64_t head[4];
    c.broadcast(head, sizeof(head), 0, "step plan", !heartbeats);  // idle: waiting for work, no deadline
    if (head[0] == kPlanStop) return;
    std::vector<int64_t> seqs(static_cast<size_t>(head[2]));
    std::vector<int32_t> ids(static_cast<size_t>(head[3]));
    if (!seqs.empty()) c.broadcast(seqs.data(), seqs.size() * sizeof(int64_t), 0, "step plan sequences");
    if (!ids.empty()) c.broadcast(ids.data(), ids.size() * sizeof(int32_t), 0, "step plan ids");
    const uint64_t before = c.collectives();
    try {
      switch (head[0]) {
        case kPlanAddSequence:
          engine.add_sequence(head[1]);
          break;
        case kPlanRemoveSequence:
          engine.remove_sequence(head[1]);
          break;
        case kPlanPrefill:
          engine.prefill(seqs.at(0), ids, head[1] != 0);
          break;
        case kPlanDecode:
          engine.decode(seqs, ids);
          break;
        case kPlanNewState:
          server.states[head[1]] = server.steps.new_state(seqs.at(0));
          break;
        case kPlanDropState:
          server.states.erase(head[1]);
          break;
        case kPlanForward:
          server.forward(head[1], seqs, ids);
          break;
        case kPlanHeartbeat:
          c.barrier("heartbeat");
          break;
        case kPlanDrafting:
          server.enable_drafting(c, head[1], seqs.at(0));
          break;
        case kPlanDraft: {
          std::vector<DraftJob> jobs(static_cast<size_t>(head[1]));
          for (size_t i = 0; i < jobs.size(); ++i)
            jobs[i] = {server.states.at(seqs.at(3 * i)).get(),
                       static_cast<int32_t>(seqs.at(3 * i + 1)),
                       static_cast<int>(seqs.at(3 * i + 2)),
                       {}};
          server.steps.draft_batch(jobs);
          break;
        }
        case kPlanCommit:
          server.steps.commit(*server.states.at(head[1]), seqs.at(0));
          break;
        case kPlanCopyState:
          server.steps.copy_state(*server.states.at(seqs.at(0)), *server.states.at(seqs.at(1)));
          break;
        case kPlanSnapshot:
          server.snapshots[head[1]] = server.steps.snapshot(*server.states.at(seqs.at(0)));
          break;
        case kPlanRestore:
          server.steps.restore(*server.states.at(seqs.at(0)), *server.snapshots.at(head[1]));
          break;
        case kPlanDropSnapshot:
          server.snapshots.erase(head[1]);
          break;
        default:
          raise("E_TP_PLAN", Where{"", "", "step plan"}, "a known step kind", std::to_string(head[0]));
      }
    } catch (const Error& e) {
      if (c.collectives() != before || e.id() == "E_TP_PLAN" || e.id() == "E_TP_RANK_FAILED") throw;
    }
  }
}

}  // namespace bloomery
