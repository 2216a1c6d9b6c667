// One engine step as the unit a backend may record and replay (Backend::begin_step, CUDA graphs): a decode
// step of several sequences (each entry a token or a short MTP verify) is bracketed and keyed by its shape; a
// step that reads a prompt chunk runs as it is, since its shapes change from call to call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/model.h"

namespace bloomery {

// Entries of at most this many tokens make a graph step (a decode token, or an MTP verify of a few drafts).
inline constexpr size_t kStepGraphMaxTokens = 8;

// The step's shape: tokens per entry and which entries want every position's logits, in entry order.
// 0 = not a graph step (a prompt chunk, or no entries).
inline uint64_t step_graph_key(std::span<const Model::BatchEntry> entries) {
  if (entries.empty()) return 0;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over (tokens, all_logits) per entry
  for (const Model::BatchEntry& e : entries) {
    if (e.ids.size() > kStepGraphMaxTokens) return 0;
    for (uint64_t v : {static_cast<uint64_t>(e.ids.size()), static_cast<uint64_t>(e.all_logits)}) {
      h ^= v;
      h *= 1099511628211ull;
    }
  }
  return h == 0 ? 1 : h;
}

// Model::forward_batch inside begin_step/end_step when the entries make a graph step.
inline std::vector<ForwardResult> forward_step(Model& model, Backend& backend,
                                               std::span<const Model::BatchEntry> entries) {
  const uint64_t key = step_graph_key(entries);
  if (key == 0) return model.forward_batch(backend, entries);
  struct Scope {  // a step whose forward throws is dropped, not left open
    Backend& be;
    bool open = true;
    ~Scope() {
      if (open) be.abort_step();
    }
  } scope{backend};
  backend.begin_step(key);
  std::vector<ForwardResult> out = model.forward_batch(backend, entries);
  scope.open = false;
  backend.end_step();
  return out;
}

}  // namespace bloomery
