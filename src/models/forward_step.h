// One engine step as the unit a backend may record and replay (Backend::begin_step, CUDA graphs): a decode
// step of several sequences (each entry a token or a short MTP verify), or a draft-layer pass of a few rows
// each, is bracketed and keyed by its shape; a step that reads a prompt chunk runs as it is, since its shapes
// change from call to call.
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

// The draft layer's pass over several sequences (Model::draft_batch) keyed apart from forward steps: rows per
// entry, after a tag no forward key starts from. 0 = not a graph step (an entry of more rows than a graph
// step takes: a long catch-up after a prompt).
inline uint64_t draft_graph_key(std::span<const Model::DraftEntry> entries) {
  if (entries.empty()) return 0;
  uint64_t h = 0x6a09e667f3bcc909ull;  // FNV-1a from another offset basis: the tag of draft passes
  for (const Model::DraftEntry& e : entries) {
    if (e.next_ids.size() > kStepGraphMaxTokens) return 0;
    h ^= static_cast<uint64_t>(e.next_ids.size());
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

// fn() inside backend.begin_step(key) … end_step() when key ≠ 0 (a step whose fn throws is dropped, not left
// open), else fn() as it is.
template <class F>
auto run_as_step(Backend& backend, uint64_t key, F&& fn) {
  if (key == 0) return fn();
  struct Scope {
    Backend& be;
    bool open = true;
    ~Scope() {
      if (open) be.abort_step();
    }
  } scope{backend};
  backend.begin_step(key);
  auto out = fn();
  scope.open = false;
  backend.end_step();
  return out;
}

// Model::forward_batch inside begin_step/end_step when the entries make a graph step.
inline std::vector<ForwardResult> forward_step(Model& model, Backend& backend,
                                               std::span<const Model::BatchEntry> entries) {
  return run_as_step(backend, step_graph_key(entries), [&] { return model.forward_batch(backend, entries); });
}

// Model::draft_batch as a graph step when its entries make one (draft steps of a few rows, and catch-ups
// over the rows a verify accepted).
inline std::vector<ForwardResult> draft_step(Model& model, Backend& backend,
                                             std::span<const Model::DraftEntry> entries) {
  return run_as_step(backend, draft_graph_key(entries), [&] { return model.draft_batch(backend, entries); });
}

}  // namespace bloomery
