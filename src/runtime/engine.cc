// Engine: owns the sequence states; a prefill runs one sequence's chunk, a decode every listed sequence's
// token in one batched pass (Model::forward_batch, bracketed as a graph step: models/forward_step.h).
#include "runtime/engine.h"

#include "core/error.h"
#include "models/forward_step.h"

namespace bloomery {

SeqId Engine::add_sequence(int64_t capacity) {
  if (capacity <= 0) capacity = model_.info().max_positions > 0 ? model_.info().max_positions : 4096;
  SeqId id = next_id_++;
  states_[id] = model_.new_state(backend_, capacity);
  return id;
}

void Engine::remove_sequence(SeqId id) {
  states_.erase(id);
  hidden_.erase(id);
}

SequenceState& Engine::state(SeqId id) {
  auto it = states_.find(id);
  if (it == states_.end())
    raise("E_SEQ_UNKNOWN", Where{"", "", "sequence"}, "a live sequence id", std::to_string(id));
  return *it->second;
}

std::vector<float> Engine::prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits) {
  if (ids.empty()) raise("E_PROMPT", Where{"", "", "ids"}, "at least one token", "none");
  ForwardResult r = model_.forward(backend_, state(seq), ids, all_logits);
  hidden_[seq] = r.hidden;
  return backend_.download(r.logits);
}

std::vector<std::vector<float>> Engine::decode(std::span<const SeqId> seqs, std::span<const int32_t> ids) {
  if (seqs.size() != ids.size())
    raise("E_BATCH", Where{"", "", "ids"}, std::to_string(seqs.size()) + " ids", std::to_string(ids.size()));
  // One pass over every sequence's token: the model reads each weight once for all of them.
  std::vector<Model::BatchEntry> batch;
  batch.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) batch.push_back({&state(seqs[i]), ids.subspan(i, 1), false});
  std::vector<ForwardResult> r = forward_step(model_, backend_, batch);
  std::vector<std::vector<float>> out;
  out.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    hidden_[seqs[i]] = r[i].hidden;
    out.push_back(backend_.download(r[i].logits));
  }
  return out;
}

std::vector<float> Engine::draft(SeqId seq, const Tensor& hidden, std::span<const int32_t> next_ids) {
  ForwardResult r = model_.draft(backend_, state(seq), hidden, next_ids);
  return backend_.download(r.logits);
}

}  // namespace bloomery
