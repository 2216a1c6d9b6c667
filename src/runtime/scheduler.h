// Slots, the request queue and continuous batching: every scheduler step runs the decode token of every
// active slot and one ubatch of each prompt still being read in ONE engine pass, so a long prompt never
// freezes the other streams; cancelled requests leave their slot at the next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "models/model.h"
#include "runtime/draft_cost.h"
#include "runtime/spec_draft.h"

namespace bloomery {

// One sequence's share of an engine pass.
struct StepItem {
  SequenceState* state = nullptr;
  std::span<const int32_t> ids;  // a prompt chunk (≤ ubatch) or the one token being decoded
  bool want_logits = false;      // the chunk ends the prompt, or a decode token: logits of the last position
  bool speculative = false;  // an MTP verify ([pending, drafts…]): logits of every row, commit() follows
  bool argmax_only =
      false;  // a greedy decode or verify (argmax_suffices): the engine may return the argmax alone
  // A sampled decode or verify the engine draws itself (engine_draw_suffices, StepEngine::draws_rows): its
  // cuts, seed and step (the index of the token the first row gives; a verify's row j is drawn at step + j,
  // so a token's draw does not depend on whether it was drafted). The engine returns the drawn ids instead of
  // the rows.
  std::optional<Backend::RowDraw> draw;
  std::vector<float>
      logits;           // out: [vocab] when want_logits ([rows · vocab] when speculative), or empty with
  int32_t argmax = -1;  //      argmax_only or draw, when the engine gave the last row's pick instead
  std::vector<int32_t>
      verify_picks;   // out: a verify's engine pick of each row (argmax_only: its argmax; draw: its draw)
  std::string error;  // out: non-empty when this sequence's forward failed (the others go on)
  // The engine picks this item's tokens (argmax or draw of its last row, or of every verify row) and returns
  // no row.
  bool engine_picks() const { return want_logits && (argmax_only || draw.has_value()); }
};

// What the scheduler needs from the engine. One call per scheduler step with every active sequence.
class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual int64_t vocab_size() const = 0;
  virtual std::unique_ptr<SequenceState> new_state(int64_t capacity) = 0;
  virtual void forward(std::span<StepItem> items) = 0;
  // Hint: `ids` are what `state` consumes in its next forward (a prompt chunk), so the engine may start
  // fetching what they read (the PLE table rows) now. Default: nothing.
  virtual void prefetch(SequenceState& state, std::span<const int32_t> ids) {}
  // Drafting (MTP): whether this engine drafts, up to k drafts after `pending` (the token the next forward
  // feeds first), and after a speculative forward the number of its rows to keep (1 … rows).
  virtual bool drafting() const { return false; }
  // Whether the engine draws sampled decode rows itself (StepItem::draw): on the card only ids come back.
  virtual bool draws_rows() const { return false; }
  virtual std::vector<int32_t> draft(SequenceState& state, int32_t pending, int k) { return {}; }
  // Several sequences' drafts at once (each job's as draft() gives it alone). Default: draft() for each.
  virtual void draft_batch(std::span<DraftJob> jobs) {
    for (DraftJob& j : jobs) j.drafts = draft(*j.state, j.pending, j.k);
  }
  virtual void commit(SequenceState& state, int64_t n) {}
  // Makes `to` (a fresh state) the same sequence as `from` (Model::copy_state); false when this engine
  // cannot, and each sequence then reads its own prompt.
  virtual bool copy_state(SequenceState& from, SequenceState& to) { return false; }
  // The scheduler is done with a state (its request finished): by default it is freed here; a TP leader
  // also tells the other ranks to free their copies.
  virtual void release(std::unique_ptr<SequenceState> state) {}
  // The prompt cache's snapshot of a committed state's recurrent parts (Model::checkpoint), taken at the end
  // of a prompt, and its restore into the same state later (Model::restore: that state's positional caches
  // still hold every row below the snapshot, since later forwards write at and past it). Null / false:
  // this engine keeps none, and only a slot's whole kept state is reused.
  virtual std::unique_ptr<StateCheckpoint> snapshot(SequenceState& state) { return nullptr; }
  virtual bool restore(SequenceState& state, const StateCheckpoint& snapshot) { return false; }
};

// The engine over a Model and a Backend: a step is ONE Model::forward_batch over every item (decode tokens
// and prompt chunks together), so all sequences share one read of every weight. An item that cannot run (no
// room left, a bad token id) fails alone: it is checked before the pass and left out of it.
class ModelStepEngine : public StepEngine {
 public:
  ModelStepEngine(Model& model, Backend& backend) : model_(model), backend_(backend) {}
  int64_t vocab_size() const override { return model_.info().vocab_size; }
  std::unique_ptr<SequenceState> new_state(int64_t capacity) override;
  void forward(std::span<StepItem> items) override;
  void prefetch(SequenceState& state, std::span<const int32_t> ids) override;
  // Drafting with the model's own MTP/NextN layer: every forward queues its hiddens for the draft layer.
  // Throws E_SPEC_NO_DRAFT when the model has none.
  void enable_drafting(DraftOptions options);
  bool drafting() const override { return drafting_; }
  bool draws_rows() const override { return backend_.draws_rows(); }
  std::vector<int32_t> draft(SequenceState& state, int32_t pending, int k) override;
  // MTP drafts of every job in batched draft passes (draft_propose_batch); n-gram drafts one by one.
  void draft_batch(std::span<DraftJob> jobs) override;
  void commit(SequenceState& state, int64_t n) override;
  bool copy_state(SequenceState& from, SequenceState& to) override;
  std::unique_ptr<StateCheckpoint> snapshot(SequenceState& state) override;
  bool restore(SequenceState& state, const StateCheckpoint& snapshot) override;

 private:
  void after_forward(const ForwardResult& r, StepItem& it);
  void catch_up_drafts(std::span<StepItem* const> items);
  // The engine's picks (StepItem::engine_picks) of these items from their logits: every argmax in one call,
  // every draw in one call.
  void pick(std::span<StepItem* const> items, std::span<const ForwardResult> results);
  Model& model_;
  Backend& backend_;
  bool drafting_ = false;
  DraftOptions draft_options_;
};

struct SamplingParams {
  double temperature = 0.8;  // ≤ 0: greedy
  int top_k = 40;            // 0: off
  double top_p = 0.95;       // 1: off
  double min_p = 0.05;       // 0: off
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repeat_penalty = 1.0;
  int repeat_last_n = 64;  // -1: the whole history
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;
  int n_probs = 0;       // top log-probabilities to report per token
  bool logprob = false;  // the sampled token's own log-probability is reported
};

// True when the sampler's draw is the logits' argmax (greedy: lowest id among equal maxima), with nothing
// that needs the row itself: no bias, no penalty, no reported probability. Such a decode step takes the
// engine's argmax (on the card) instead of the row of logits.
bool argmax_suffices(const SamplingParams& p);
// True when a sampled (temperature > 0) decode needs nothing but the draw: no penalty, no bias, no reported
// probability. Such a step is drawn by the engine (StepEngine::draws_rows) from the request's seed and the
// step's index, instead of bringing the row back to the host sampler.
bool engine_draw_suffices(const SamplingParams& p);

struct TokenProb {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;        // log-softmax of the raw logits at `id`
  std::vector<TokenProb> top;  // the n_probs most likely (raw distribution), most likely first
};

// Picks the next token from one row of logits. `recent`: the generated and prompt tokens the penalties see.
using SampleFn = std::function<SampledToken(std::span<const float> logits, const SamplingParams& params,
                                            std::span<const int32_t> recent, std::mt19937_64& rng)>;

enum class StopReason { None, Eos, Limit, Word, ContextFull, Cancelled, Error };
const char* stop_reason_name(StopReason r);

struct FinishInfo {
  StopReason reason = StopReason::None;
  std::string error;
  int slot = -1;
  int64_t n_prompt = 0;
  int64_t n_predicted = 0;
  double prompt_ms = 0.0;
  double predicted_ms = 0.0;
  int64_t draft_n = 0;           // drafts verified for this request
  int64_t draft_n_accepted = 0;  // of which accepted
  int64_t n_cached = 0;  // prompt tokens not evaluated: taken from another request's prefill or a kept state
};

// Requests that carry the same PrefillShare have the same prompt (n > 1 choices of one prompt): the first one
// admitted reads it, the others admitted while it does wait in their slots and, once it is read, start from a
// copy of that state and of its last logits, so n choices cost one prefill and n decodes. Members admitted
// later (fewer free slots than choices) share the next read among themselves the same way. Scheduler-thread
// data.
struct PrefillShare {
  int leader = -1;  // the slot reading the prompt now, −1: none
};

struct GenRequest {
  std::vector<int32_t> prompt;
  int64_t n_predict = -1;  // -1: until EOS or the slot's context end
  SamplingParams sampling;
  std::vector<int32_t> eos_ids;
  bool ignore_eos = false;
  int id_slot = -1;          // ≥ 0: this slot only
  bool cache_prompt = true;  // may start from an idle slot's kept state (SchedulerConfig::cache_prompt)
  // This request's drafting (llama-server's per-request `speculative.n_max` / `speculative.n_min`): at most
  // spec_n_max drafts a round (0: none) and none verified below spec_n_min; -1: the server's (SpecConfig).
  int spec_n_max = -1;
  int spec_n_min = -1;
  std::shared_ptr<PrefillShare> share;  // n > 1 choices of one prompt: one prefill for all (PrefillShare)
  // Scheduler thread, before each sampling: may lower logits (a grammar's mask sets the tokens it rejects to
  // -inf). Empty: no constraint.
  std::function<void(std::vector<float>& logits)> constrain;
  // A helper thread, while the step's forward runs on the card (never at the same time as constrain or
  // on_token): makes constrain's next call cheap (a grammar computes the mask of its current state, so a
  // first visit's full vocabulary scan overlaps the forward instead of following it). Empty: nothing to
  // prepare.
  std::function<void()> prepare_constraint;
  // Scheduler thread. Called for every generated token that is not an EOS; returning false stops the request
  // (a stop string matched) with StopReason::Word.
  std::function<bool(const SampledToken&)> on_token;
  // Scheduler thread (or submit's caller when refused). Called exactly once, last.
  std::function<void(const FinishInfo&)> on_finish;
};

// A submitted request: cancel() is safe from any thread and takes effect at the next step.
class Ticket {
 public:
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::atomic<bool> cancelled_{false};
};

// BLOOMERY_SPEC_MEASURED_COST=1 (SpecConfig::measured_cost).
bool measured_cost_default();

// Speculative decoding in the scheduler (the engine drafts: StepEngine::draft).
struct SpecConfig {
  int n_max = 0;       // most drafts per round; 0: off
  int n_min = 0;       // fewer drafts than this: verify none (llama-server's --spec-draft-n-min)
  float p_min = 0.0f;  // for the engine's drafting (DraftOptions::p_min)
  bool ngram = false;  // for the engine: n-gram lookup drafts (--spec-type ngram-simple) instead of MTP
  // Adaptive width per slot: from the slot's measured acceptance p (a moving average per draft), the width k
  // in 0 … n_max that maximises the expected tokens per verify, (1 − p^(k+1)) / (1 − p), over its cost,
  // 1 + c · k (in plain decode steps of the step's batch); at width 0 a one-draft probe every probe_every
  // steps keeps measuring. Off: always n_max. c, a drafted row's cost, is draft_cost; with measured_cost it
  // is measured per batch size (runtime/draft_cost.h: a few plain steps of each size are timed, and one every
  // 32 steps after) and draft_cost until then. measured_cost is off unless BLOOMERY_SPEC_MEASURED_COST=1
  // (docs/performance.md: on the CPU it cut the drafts where they lose but not the time, since a paused slot
  // still runs its draft layer over every token; not yet measured on the card at many slots).
  bool adaptive = true;
  float draft_cost = 0.25f;
  bool measured_cost = measured_cost_default();
  int probe_every = 16;
};

// Drafted and accepted counts by draft position (0 = the first draft of a round), as /slots and /metrics
// show them.
inline constexpr int kMaxDrafts = 8;
struct DraftCounts {
  uint64_t drafted[kMaxDrafts] = {}, accepted[kMaxDrafts] = {};
  uint64_t rounds = 0;  // verifies with at least one draft
  uint64_t drafted_total() const {
    uint64_t n = 0;
    for (uint64_t v : drafted) n += v;
    return n;
  }
  uint64_t accepted_total() const {
    uint64_t n = 0;
    for (uint64_t v : accepted) n += v;
    return n;
  }
  void add(const DraftCounts& o) {
    for (int i = 0; i < kMaxDrafts; ++i) drafted[i] += o.drafted[i], accepted[i] += o.accepted[i];
    rounds += o.rounds;
  }
};

struct SchedulerConfig {
  int n_slots = 1;
  int64_t n_ctx_slot = 4096;  // tokens each slot's state holds
  int64_t n_batch = 2048;     // most prompt tokens per step, over all slots
  int64_t n_ubatch = 512;     // most prompt tokens of one sequence per step
  SpecConfig spec;            // drafting (the engine must draft too: StepEngine::drafting)
  // Prompt cache (llama-server's --cache-prompt): a finished request's slot keeps its state and a snapshot
  // of its recurrent parts at the end of its prompt (StepEngine::snapshot). A later request whose prompt
  // starts with every token that state consumed (a multi-turn chat: the last prompt and the answer) resumes
  // from it; else one whose prompt starts with the last prompt (a template that drops the answer's
  // reasoning, an agent's retry) resumes from the snapshot; either reads only the rest. Recurrent and conv
  // states cannot be cut back, so no other prefix counts. The kept state is a slot's own, which the memory
  // plan holds for every slot; the snapshots are counted there too (EngineHost::memory_plan).
  bool cache_prompt = true;
};

// Counters behind /metrics (llama-server's names) and /slots.
struct SchedulerStats {
  uint64_t prompt_tokens_total = 0;
  double prompt_seconds_total = 0.0;
  uint64_t tokens_predicted_total = 0;
  double tokens_predicted_seconds_total = 0.0;
  uint64_t n_decode_total = 0;      // engine passes
  uint64_t n_busy_slots_total = 0;  // Σ busy slots over passes
  uint64_t n_tokens_max = 0;        // most context in use by one slot
  int requests_processing = 0;
  int requests_deferred = 0;
  uint64_t requests_finished = 0;
  uint64_t requests_cancelled = 0;
  DraftCounts drafts;  // over every request
};

struct SlotInfo {
  int id = 0;
  bool is_processing = false;
  int64_t n_ctx = 0;
  int64_t n_prompt = 0;
  int64_t n_past = 0;  // tokens in the slot's state
  int64_t n_decoded = 0;
  int64_t n_remain = -1;
  uint64_t id_task = 0;
  SamplingParams params;
  DraftCounts drafts;  // the current request's
};

class Scheduler {
 public:
  Scheduler(StepEngine& engine, SchedulerConfig config, SampleFn sample);
  ~Scheduler();  // stops the loop; requests still queued or running finish with Cancelled

  // Queues a request. A prompt that cannot fit a slot (prompt + 1 > n_ctx_slot), an empty prompt or an
  // id_slot out of range are the caller's to refuse before this; here they finish at once with Error.
  std::shared_ptr<Ticket> submit(GenRequest request);
  // Several queued together, in order: the scheduler sees them all at its next admission (so the members of
  // a PrefillShare take slots in the same pass where enough are free).
  std::vector<std::shared_ptr<Ticket>> submit_all(std::vector<GenRequest> requests);

  std::vector<SlotInfo> slots() const;
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Slot;
  struct Pending {
    GenRequest request;
    std::shared_ptr<Ticket> ticket;
    uint64_t id_task;
  };
  void loop();
  struct Reuse {
    int64_t n = 0;               // prompt tokens taken
    bool from_snapshot = false;  // from the slot's prompt-end snapshot, not its live state
  };
  bool admit_locked(std::vector<std::function<void(const FinishInfo&)>>& cancelled,
                    std::vector<std::pair<Slot*, Reuse>>& admitted);
  void publish_locked();
  void finish(Slot& s, StopReason reason, std::string error = {});
  void step();
  void hint(Slot& s, int64_t take);
  static Reuse reusable_prefix(const Slot& s, const GenRequest& r);
  void drop_state(Slot& s);
  void resume_or_drop(Slot& s, Reuse reuse);
  // The slot's drafts this step; row_cost: a drafted row's cost in plain steps (SpecConfig::adaptive).
  int draft_width(Slot& s, double row_cost) const;
  // Whether slots draft at all (config and engine).
  bool drafts_configured() const;
  int adaptive_width(Slot& s, double row_cost) const;
  void take_tokens(Slot& s, StepItem& it);
  void fork_followers(Slot& leader, const StepItem& it);

  StepEngine& engine_;
  const SchedulerConfig config_;
  SampleFn sample_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::deque<Pending> queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t next_task_ = 1;
  uint64_t lru_clock_ = 0;
  size_t rr_ = 0;  // round-robin start for prompt chunks
  SchedulerStats stats_;
  DraftCost draft_cost_;  // the scheduler thread's
  // The acceptance per draft over every slot's recent drafts (a moving average, the scheduler thread's): a new
  // request's adaptive width starts from it instead of from an optimistic 1, so that a server whose drafts
  // are rejected does not relearn that over the first ~14 rounds of every request (measured on an H100,
  // 2026-12-07: 32-token requests on random weights verified 15 rounds each). Optimistic until any draft
  // was verified.
  double accept_prior_ = 1.0;
  std::vector<SlotInfo> published_;
  std::thread thread_;
};

}  // namespace bloomery
