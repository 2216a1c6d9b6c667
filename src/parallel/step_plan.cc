// Step plans: a header of four int64 (kind, argument, sequence count, id count), then the sequence ids and
// the token ids, each one broadcast from rank 0.
#include "parallel/step_plan.h"

#include "core/error.h"

namespace bloomery {
namespace {

enum Kind : int64_t { kStop, kAddSequence, kRemoveSequence, kPrefill, kDecode };

}  // namespace

void TpLeader::send(int64_t kind, int64_t arg, std::span<const SeqId> seqs, std::span<const int32_t> ids) {
  int64_t head[4] = {kind, arg, int64_t(seqs.size()), int64_t(ids.size())};
  c_.broadcast(head, sizeof(head), 0, "step plan");
  if (!seqs.empty())
    c_.broadcast(const_cast<SeqId*>(seqs.data()), seqs.size() * sizeof(SeqId), 0, "step plan sequences");
  if (!ids.empty())
    c_.broadcast(const_cast<int32_t*>(ids.data()), ids.size() * sizeof(int32_t), 0, "step plan ids");
}

SeqId TpLeader::add_sequence(int64_t capacity) {
  send(kAddSequence, capacity, {}, {});
  return e_.add_sequence(capacity);
}

void TpLeader::remove_sequence(SeqId id) {
  send(kRemoveSequence, id, {}, {});
  e_.remove_sequence(id);
}

std::vector<float> TpLeader::prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits) {
  const SeqId one[1] = {seq};
  send(kPrefill, all_logits ? 1 : 0, one, ids);
  return e_.prefill(seq, ids, all_logits);
}

std::vector<std::vector<float>> TpLeader::decode(std::span<const SeqId> seqs, std::span<const int32_t> ids) {
  send(kDecode, 0, seqs, ids);
  return e_.decode(seqs, ids);
}

void TpLeader::stop() {
  send(kStop, 0, {}, {});
}

void tp_follow(Communicator& c, Engine& engine) {
  for (;;) {
    int64_t head[4];
    c.broadcast(head, sizeof(head), 0, "step plan", true);  // waiting for work has no deadline
    if (head[0] == kStop) return;
    std::vector<SeqId> seqs(static_cast<size_t>(head[2]));
    std::vector<int32_t> ids(static_cast<size_t>(head[3]));
    if (!seqs.empty()) c.broadcast(seqs.data(), seqs.size() * sizeof(SeqId), 0, "step plan sequences");
    if (!ids.empty()) c.broadcast(ids.data(), ids.size() * sizeof(int32_t), 0, "step plan ids");
    const uint64_t before = c.collectives();
    try {
      switch (head[0]) {
        case kAddSequence:
          engine.add_sequence(head[1]);
          break;
        case kRemoveSequence:
          engine.remove_sequence(head[1]);
          break;
        case kPrefill:
          engine.prefill(seqs.at(0), ids, head[1] != 0);
          break;
        case kDecode:
          engine.decode(seqs, ids);
          break;
        default:
          raise("E_TP_PLAN", Where{"", "", "step plan"}, "a known step kind", std::to_string(head[0]));
      }
    } catch (const Error& e) {
      if (c.collectives() != before || e.id() == "E_TP_PLAN") throw;
    }
  }
}

}  // namespace bloomery
