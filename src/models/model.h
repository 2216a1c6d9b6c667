// The model-spec interface: a family declares its tensors from config.json, allocates per-sequence state and
// runs its forward (and its MTP/NextN draft layer) over backend ops. One implementation per family
// (models/qwen3_next.cc, models/qwen4_exp.cc, models/glm5_next.cc); created by name in model_registry.cc.
//
// Life of a model: registry → Model(config) → declare() → the loader checks every declared tensor against the
// checkpoint (missing / wrong shape refused before any compute) and loads them through the backend → bind() →
// new_state() per sequence → forward() per batch of tokens of one sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "formats/weight_slice.h"

namespace bloomery {
class Communicator;  // parallel/communicator.h
}

namespace bloomery {

// What the registry hands a family: the text model's config and the checkpoint naming.
struct ModelConfig {
  std::string model_type;  // e.g. "qwen3_next" (the outer type when a text_config wrapper exists)
  nlohmann::json text;     // the text model's fields: config["text_config"] when present, else config
  nlohmann::json root;     // the whole config.json
  // Prefix of the text tower's tensors: "model." (text-only) or "model.language_model." (multimodal wrapper).
  // Top-level tensors (lm_head.weight, mtp.*) carry no prefix.
  std::string prefix = "model.";
  // Tensor parallelism (models/tp_shard.h): this rank of tp_size; the family declares rank-local shapes and
  // cuts, and sums its row-parallel partials through `comm` (null when tp_size is 1).
  int tp_rank = 0, tp_size = 1;
  Communicator* comm = nullptr;
  // Element type of the attention K/V caches and GLM's MLA latent cache (-ctk/-ctv): F32 (the reference path)
  // or BF16. The other state (recurrent, conv, indexer keys) stays f32.
  ElemType kv_type = ElemType::F32;
};

// One tensor a family needs. Shapes are logical (dequantised) shapes derived from config.json.
struct TensorDecl {
  std::string name;            // full checkpoint name, prefix included ("model.layers.0.linear_attn.A_log")
  std::vector<int64_t> shape;  // expected shape; empty = take the stored one
  bool optional = false;  // absent is fine: only the draft layer's tensors, which the checkpoint may not ship
                          // (and which are dropped together under TP when one cannot be cut)
  bool streamed = false;  // rows are read on demand (PLE n-gram table), never decoded whole
  TensorCut cut = {};     // a tensor-parallel rank's part of the stored tensor (`shape` is the part's)
};

// The weights the loader created, by full checkpoint name. Outlives the Model that binds to it.
class WeightSet {
 public:
  // Throws E_MODEL_TENSOR_MISSING naming the tensor.
  const Weight& get(const std::string& name) const;
  const Weight* find(const std::string& name) const;
  void put(std::string name, Weight w) { map_[std::move(name)] = std::move(w); }
  size_t size() const { return map_.size(); }

 private:
  std::map<std::string, Weight, std::less<>> map_;
};

struct ModelInfo {
  std::string family;  // "qwen3_next"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // D
  int64_t draft_hidden_size = 0;  // width of the hidden handed to the draft layer (D, or n·D for qwen4_exp)
  std::vector<int32_t> eos_ids;   // config eos_token_id (int or list)
  bool has_draft = false;         // an MTP/NextN layer was declared and found
  int64_t max_positions = 0;      // max_position_embeddings (0 = unknown)
};

// What a speculative forward (BatchEntry::speculative, an MTP verify) leaves to undo until Model::commit
// keeps its first n rows. Positional caches (KV, latents, indexer keys and pools, the draft cache) need
// nothing: rows past `pos` are never read and are written again by the next forward. The recurrent parts
// (GDN/KDA states, conv histories, the PLE n-gram context) ran on copies, so the state itself is untouched:
// all rows accepted takes the copies (`swaps`, a handle swap); fewer replays the conv and the step-form delta
// rule over the accepted rows from the untouched state, with the verify's own saved inputs (`replays`; design
// B of next-capabilities.md §1.2). The verify rows use the step form, so both give what feeding the accepted
// tokens one at a time gives.
struct SpecPending {
  bool active = false;
  int64_t p0 = 0, T = 0;                          // the speculative rows: positions p0 … p0 + T − 1
  std::vector<std::pair<Tensor*, Tensor>> swaps;  // state slot ← its copy after all T rows
  std::vector<std::function<void(Backend&, int64_t)>> replays;  // redo a slot over the first n < T rows
  uint64_t bytes = 0;                                           // device bytes held by the copies
};

// Per-sequence state. Each family derives its own (KV caches, conv / recurrent states, indexer keys, n-gram
// context) with tensors allocated through the backend; the runtime owns these objects and never looks inside.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  int64_t pos = 0;               // tokens already consumed (the next token's position)
  int64_t capacity = 0;          // the most tokens this state can hold (KV cache length)
  int64_t draft_pos = 0;         // tokens the draft layer has cached
  std::vector<int32_t> history;  // every token id consumed, in order
  SpecPending spec;              // an uncommitted speculative forward (spec.active), else empty
  // Runtime bookkeeping for drafting (runtime/spec_draft.h): target hiddens not yet given to the draft layer
  // ([rows, draft_hidden_size] pieces, in position order) and the token that follows each row, as known.
  std::vector<Tensor> draft_rows;
  std::vector<int32_t> draft_next;
  Tensor verify_hidden;  // the pending verify's hiddens and ids, queued once commit keeps some
  std::vector<int32_t> verify_ids;
  // Runs when the snapshot is freed: a TP leader's note to its ranks to free their copies. Usually null.
  std::shared_ptr<void> on_free;
};

// One named piece of a sequence state, for checkpoints and for tests that compare states tensor by tensor.
struct StatePart {
  std::string name;          // "layers.3.rec", "layers.0.ple_ctx"
  Tensor* tensor = nullptr;  // a backend tensor, or null for a host part
  int64_t rows = -1;         // positional: only rows [0, rows) of dim 0 hold state; −1: all (recurrent)
  std::vector<int64_t>* host = nullptr;  // a host part (the PLE n-gram context), always recurrent
};

// A copy of a state's recurrent parts and counters (Model::checkpoint), restorable while the positional
// caches still hold the rows below its pos (any later forward keeps them: it writes at pos and beyond).
struct StateCheckpoint {
  int64_t pos = 0, draft_pos = 0;
  std::vector<int32_t> history;
  std::vector<Tensor> tensors;              // the recurrent parts, in state_parts order
  std::vector<std::vector<int64_t>> hosts;  // the host parts, in state_parts order
  std::vector<Tensor> draft_rows;
  std::vector<int32_t> draft_next;
  Tensor verify_hidden;  // the pending verify's hiddens and ids, queued once commit keeps some
  std::vector<int32_t> verify_ids;
  // Runs when the snapshot is freed: a TP leader's note to its ranks to free their copies. Usually null.
  std::shared_ptr<void> on_free;
};

struct ForwardResult {
  Tensor logits;  // [T, V] (all positions) or [1, V] (last position only)
  Tensor hidden;  // [T, draft_hidden_size]: the hidden state each position hands to the draft layer
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;

  // Every tensor this model reads, from the config alone.
  virtual std::vector<TensorDecl> declare() const = 0;
  // Takes the loaded weights (pointers into `weights` stay valid for the model's life). Optional tensors that
  // were absent are simply not in the set.
  virtual void bind(Backend& backend, const WeightSet& weights) = 0;

  // A fresh sequence able to hold `capacity` tokens.
  virtual std::unique_ptr<SequenceState> new_state(Backend& backend, int64_t capacity) const = 0;
  // Bytes new_state(capacity) allocates (KV caches, recurrent and conv states, indexer keys), for the memory
  // plan before anything is allocated. Default 0 = unknown.
  virtual uint64_t state_bytes(int64_t capacity) const { return 0; }
  // Hint before forward(state, upcoming_ids): lets a family start fetching what that call will read from
  // host memory (the PLE table rows of those tokens). Must not change the state. Default: nothing.
  virtual void prefetch(Backend& backend, const SequenceState& state, std::span<const int32_t> upcoming_ids) {
  }

  // Consumes ids (a prompt chunk or one decode token) at positions state.pos … state.pos + T − 1 and advances
  // the state. all_logits: logits for every position, else only the last. Throws E_CONTEXT_FULL past
  // capacity.
  virtual ForwardResult forward(Backend& backend, SequenceState& state, std::span<const int32_t> ids,
                                bool all_logits) = 0;

  // Several sequences in ONE pass: each entry is a prompt chunk or a decode token of its own sequence.
  // Token-wise work (projections, experts, norms) runs over the rows of all entries together, so several
  // decoding slots or an MTP verify share one read of every weight; the token mixers (attention, GDN, conv,
  // PLE context) run per entry on that entry's state. Results are in entry order and equal forward() per
  // entry. Default: forward() entry after entry (a family overrides it with the batched pass).
  // speculative: an MTP verify. The state moves past the ids as usual, but until commit(state, n) the
  // recurrent parts can still go back to any n of the rows (see SpecPending); verify rows take the step form
  // of the GDN/KDA rule, never the chunked one. A state with an uncommitted verify refuses any forward
  // (E_STATE_PENDING).
  struct BatchEntry {
    SequenceState* state = nullptr;
    std::span<const int32_t> ids;
    bool all_logits = false;
    bool speculative = false;
  };
  virtual std::vector<ForwardResult> forward_batch(Backend& backend, std::span<const BatchEntry> entries) {
    std::vector<ForwardResult> out;
    out.reserve(entries.size());
    for (const BatchEntry& e : entries) out.push_back(forward(backend, *e.state, e.ids, e.all_logits));
    return out;
  }

  // ---- sequence state v2 (checkpoint / restore / commit / truncate) ----
  // Every part of a state by name: recurrent parts whole, positional caches with their live rows.
  virtual std::vector<StatePart> state_parts(SequenceState& state) const { return {}; }
  // After a speculative forward of T rows: keeps the first n (1 ≤ n ≤ T), as if only those ids had been fed
  // one at a time. Throws E_STATE_ROLLBACK when nothing is pending or n is out of range.
  virtual void commit(Backend& backend, SequenceState& state, int64_t n);
  // Back to position `pos`: within a pending speculative forward (p0 < pos ≤ p0 + T) this is commit; at the
  // state's own pos nothing happens; anything else needs a checkpoint (E_STATE_ROLLBACK names it).
  void truncate(Backend& backend, SequenceState& state, int64_t pos);
  // A copy of the recurrent parts and counters; restore() puts them back (positional caches roll back by
  // pos). Refused while a speculative forward is pending.
  // Virtual, as commit and copy_state, so the scheduler (built without the models library) calls them
  // through the interface.
  virtual StateCheckpoint checkpoint(Backend& backend, SequenceState& state) const;
  virtual void restore(Backend& backend, SequenceState& state, const StateCheckpoint& cp) const;
  // Makes `to` (a fresh state of this model, at least as large) the same sequence as `from`: every part
  // copied (positional caches their live rows), counters, history and the draft queue. n > 1 choices of one
  // prompt fork from one prefill this way. Refused while `from` has a speculative forward pending. (Virtual
  // so that the scheduler, built without the model code in the server core, calls it through the vtable.)
  virtual void copy_state(Backend& backend, SequenceState& from, SequenceState& to) const;
  // Device bytes one sequence's verify holds until commit (the copies of its recurrent
  // parts), for the memory plan. Default 0.
  virtual uint64_t spec_bytes() const { return 0; }

  // Draft layer (MTP / NextN): hidden[T, draft_hidden_size] are the target's hiddens at positions
  // p … p+T−1 (p = state.draft_pos) and next_ids the tokens at p+1 … p+T. Runs the draft layer at positions
  // p+1 … p+T with its own cache (advancing draft_pos) and returns its logits (all rows) and its output
  // hidden (fed back for further draft steps). Default: no draft layer.
  virtual ForwardResult draft(Backend& backend, SequenceState& state, const Tensor& hidden,
                              std::span<const int32_t> next_ids) {
    raise("E_MODEL_NO_DRAFT", Where{"", "", "draft"}, "a model with an MTP/NextN layer", info().family);
  }
  // One sequence's share of a batched draft pass: draft()'s arguments.
  struct DraftEntry {
    SequenceState* state;
    Tensor hidden;
    std::span<const int32_t> next_ids;
    // Which rows go through the head. A catch-up wants only the draft layer's caches and hidden (None: a
    // pass where no entry wants logits skips the head, a vocabulary-wide product a row, and returns none); a
    // proposal reads only its last row (Last: one head row, not one for every caught-up row); All for
    // draft()'s callers, which check every row against a reference.
    enum class Logits { None, Last, All } logits = Logits::All;
  };
  // True when some entry of a draft pass wants logits (DraftEntry::logits).
  static bool any_logits(std::span<const DraftEntry> entries) {
    for (const DraftEntry& e : entries)
      if (e.logits != DraftEntry::Logits::None) return true;
    return false;
  }
  // The draft layer over several sequences in one pass (their rows stacked, so each weight is read once; the
  // caches and positions each sequence's own): each result is what draft() gives for that entry alone.
  // Default: draft() for each.
  virtual std::vector<ForwardResult> draft_batch(Backend& backend, std::span<const DraftEntry> entries) {
    std::vector<ForwardResult> out;
    for (const DraftEntry& e : entries) out.push_back(draft(backend, *e.state, e.hidden, e.next_ids));
    return out;
  }
};

// A family whose forward() is its batched pass over one entry, so that one code path serves both (all three
// families here). It implements forward_batch.
class BatchedModel : public Model {
 public:
  ForwardResult forward(Backend& backend, SequenceState& state, std::span<const int32_t> ids,
                        bool all_logits) final {
    const BatchEntry one{&state, ids, all_logits};
    return std::move(forward_batch(backend, std::span(&one, 1))[0]);
  }
  std::vector<ForwardResult> forward_batch(Backend& backend,
                                           std::span<const BatchEntry> entries) override = 0;
};

}  // namespace bloomery
