// The engine step API: sequences (each with its own state: KV cache, conv/recurrent states, ...) in flight at
// once; prefill(seq, ids) and decode(seqs, ids) return logits. Knows models and backends by interface only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "models/model.h"

namespace bloomery {

using SeqId = int64_t;

class Engine {
 public:
  Engine(Backend& backend, Model& model) : backend_(backend), model_(model) {}

  // A new empty sequence holding up to `capacity` tokens (0: the model's max_position_embeddings, else 4096).
  SeqId add_sequence(int64_t capacity = 0);
  void remove_sequence(SeqId id);
  size_t sequences() const { return states_.size(); }
  SequenceState& state(SeqId id);

  // Consumes a prompt (or prompt chunk); returns logits [T, V] row-major when all_logits, else the last row.
  std::vector<float> prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits = false);
  // One token for each listed sequence; returns one logits row per sequence, in order.
  std::vector<std::vector<float>> decode(std::span<const SeqId> seqs, std::span<const int32_t> ids);

  // Draft (MTP) logits for the last consumed position of `seq` given the token that follows it; the draft
  // layer must have been fed every earlier position (prefill_draft). Returns [T, V] for the T rows given.
  std::vector<float> draft(SeqId seq, const Tensor& hidden, std::span<const int32_t> next_ids);

  // The hiddens handed to the draft layer by the last forward of `seq` ([T, Hd]).
  const Tensor& last_hidden(SeqId seq) { return hidden_[seq]; }

  Backend& backend() { return backend_; }
  Model& model() { return model_; }

 private:
  Backend& backend_;
  Model& model_;
  SeqId next_id_ = 1;
  std::map<SeqId, std::unique_ptr<SequenceState>> states_;
  std::map<SeqId, Tensor> hidden_;
};

}  // namespace bloomery
