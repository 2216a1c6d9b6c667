#include "runtime/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <future>

#include "core/error.h"
#include "models/forward_step.h"

namespace bloomery {

using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::None:
      return "none";
    case StopReason::Eos:
      return "eos";
    case StopReason::Limit:
      return "limit";
    case StopReason::Word:
      return "word";
    case StopReason::ContextFull:
      return "limit";
    case StopReason::Cancelled:
      return "cancelled";
    case StopReason::Error:
      return "error";
  }
  return "none";
}

std::unique_ptr<SequenceState> ModelStepEngine::new_state(int64_t capacity) {
  return model_.new_state(backend_, capacity);
}

// What Model::forward_batch refuses before touching any state (models/batch_rows.cc makes the same checks;
// repeated here because the server's scheduler library links no model code).
static void check_item(const StepItem& it, int64_t vocab) {
  const int64_t T = static_cast<int64_t>(it.ids.size());
  if (T == 0) raise("E_PROMPT", Where{"", "", "ids"}, "at least one token", "none");
  if (it.state->pos + T > it.state->capacity)
    raise("E_CONTEXT_FULL", Where{"", "", "capacity"},
          "at most " + std::to_string(it.state->capacity) + " tokens", std::to_string(it.state->pos + T));
  for (int32_t id : it.ids)
    if (id < 0 || id >= vocab)
      raise("E_TOKEN_RANGE", Where{"", "", "ids"}, "token ids below " + std::to_string(vocab),
            std::to_string(id));
}

// The last row of an item's logits (every row for a verify), downloaded; the hiddens go to the draft queue
// (a verify's wait for commit, which knows how many rows stay; the others' catch-up is catch_up_drafts').
void ModelStepEngine::after_forward(const ForwardResult& r, StepItem& it) {
  if (drafting_ && draft_options_.source == DraftOptions::Source::Mtp) {
    if (it.speculative) {
      it.state->verify_hidden = r.hidden;
      it.state->verify_ids.assign(it.ids.begin(), it.ids.end());
    } else {
      draft_feed(model_, backend_, *it.state, r.hidden, it.ids, false);
    }
  }
  if (!it.want_logits || it.engine_picks()) return;  // forward() picks its token instead
  std::vector<float> all = backend_.download(r.logits);
  if (it.speculative) {
    it.logits = std::move(all);
    return;
  }
  const int64_t v = r.logits.cols();
  it.logits.assign(all.end() - v, all.end());  // the last position's row
}

namespace {

// Nothing but the token is needed from the row: no penalty, no bias, no reported probability.
bool token_alone(const SamplingParams& p) {
  const bool penalties = p.repeat_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
  return !penalties && p.logit_bias.empty() && p.n_probs == 0 && !p.logprob;
}

bool greedy(const SamplingParams& p) {
  return p.temperature <= 0.0 || p.top_k == 1;
}

}  // namespace

bool measured_cost_default() {
  const char* v = std::getenv("BLOOMERY_SPEC_MEASURED_COST");
  return v && std::string(v) == "1";
}

bool argmax_suffices(const SamplingParams& p) {
  return greedy(p) && token_alone(p);
}

bool engine_draw_suffices(const SamplingParams& p) {
  return !greedy(p) && token_alone(p);
}

void ModelStepEngine::pick(std::span<StepItem* const> items, std::span<const ForwardResult> results) {
  // Every argmax in one call and every draw in one call: each row of a verify and the last row of a decode,
  // in item order (a verify's row j drawn at its draw's step + j).
  std::vector<Tensor> argmax_rows, draw_rows;
  std::vector<StepItem*> argmax_of, drawn;  // the item each row is for
  std::vector<Backend::RowDraw> draws;
  for (size_t i = 0; i < items.size(); ++i) {
    StepItem& it = *items[i];
    if (!it.engine_picks()) continue;
    const Tensor& l = results[i].logits;
    const int64_t first = it.speculative ? 0 : l.rows() - 1;
    for (int64_t j = first; j < l.rows(); ++j) {
      if (it.argmax_only) {
        argmax_rows.push_back(l.slice(j, 1));
        argmax_of.push_back(&it);
      } else {
        draw_rows.push_back(l.slice(j, 1));
        draws.push_back(*it.draw);
        draws.back().step += static_cast<uint64_t>(j - first);
        drawn.push_back(&it);
      }
    }
  }
  const auto take = [](std::span<StepItem* const> of, const std::vector<int32_t>& ids) {
    for (size_t i = 0; i < ids.size(); ++i) {
      StepItem& it = *of[i];
      if (it.speculative)
        it.verify_picks.push_back(ids[i]);
      else
        it.argmax = ids[i];
    }
  };
  if (!argmax_rows.empty()) take(argmax_of, backend_.argmax_last_rows(argmax_rows));
  if (!draw_rows.empty()) take(drawn, backend_.draw_last_rows(draw_rows, draws));
}

void ModelStepEngine::enable_drafting(DraftOptions options) {
  if (options.source == DraftOptions::Source::Mtp && !model_.info().has_draft)
    raise("E_SPEC_NO_DRAFT", Where{"", "", "--spec-type"}, "a checkpoint with an MTP/NextN draft layer",
          model_.info().family + " without one");
  drafting_ = true;
  draft_options_ = std::move(options);
}

std::vector<int32_t> ModelStepEngine::draft(SequenceState& state, int32_t pending, int k) {
  if (!drafting_) return {};
  return draft_propose(model_, backend_, state, pending, k, draft_options_);
}

void ModelStepEngine::draft_batch(std::span<DraftJob> jobs) {
  if (!drafting_) {
    for (DraftJob& j : jobs) j.drafts.clear();
  } else if (draft_options_.source == DraftOptions::Source::Ngram) {
    for (DraftJob& j : jobs)
      j.drafts = draft_propose(model_, backend_, *j.state, j.pending, j.k, draft_options_);
  } else {
    draft_propose_batch(model_, backend_, jobs, draft_options_);
  }
}

void ModelStepEngine::commit(SequenceState& state, int64_t n) {
  model_.commit(backend_, state, n);
  if (drafting_ && state.verify_hidden.defined()) {
    draft_feed(model_, backend_, state, state.verify_hidden.slice(0, n),
               std::span<const int32_t>(state.verify_ids).first(static_cast<size_t>(n)), false);
  }
  state.verify_hidden = Tensor();
  state.verify_ids.clear();
}

bool ModelStepEngine::copy_state(SequenceState& from, SequenceState& to) {
  model_.copy_state(backend_, from, to);
  return true;
}

std::unique_ptr<StateCheckpoint> ModelStepEngine::snapshot(SequenceState& state) {
  return std::make_unique<StateCheckpoint>(model_.checkpoint(backend_, state));
}

bool ModelStepEngine::restore(SequenceState& state, const StateCheckpoint& snapshot) {
  model_.restore(backend_, state, snapshot);
  return true;
}

// The draft layer over the rows the plain (not speculative) items just committed, for all of them in one
// pass: prompt chunks at once (their hiddens are large), one-token decode rows once their queue holds
// DraftOptions::defer_rows (until then the next proposal catches them up in its own pass).
void ModelStepEngine::catch_up_drafts(std::span<StepItem* const> items) {
  if (!drafting_ || draft_options_.source != DraftOptions::Source::Mtp) return;
  std::vector<SequenceState*> states;
  for (StepItem* it : items) {
    const bool chunk = it->ids.size() > 1;
    const bool full = std::ssize(it->state->draft_next) >= draft_options_.defer_rows;
    if (!it->speculative && (chunk || full)) states.push_back(it->state);
  }
  draft_catch_up_batch(model_, backend_, states);
}

void ModelStepEngine::forward(std::span<StepItem> items) {
  // Each item is checked on its own first (the same checks forward_batch makes before touching any state),
  // so one sequence out of room fails alone and the others still share the pass.
  std::vector<Model::BatchEntry> batch;
  std::vector<StepItem*> owners;
  const int64_t vocab = model_.info().vocab_size;
  for (auto& it : items) {
    try {
      check_item(it, vocab);
    } catch (const std::exception& ex) {
      it.error = ex.what();
      continue;
    }
    batch.push_back({it.state, it.ids, it.speculative, it.speculative});
    owners.push_back(&it);
  }
  if (batch.empty()) return;
  try {
    std::vector<ForwardResult> r = forward_step(model_, backend_, batch);
    for (size_t i = 0; i < owners.size(); ++i) after_forward(r[i], *owners[i]);
    catch_up_drafts(owners);
    // Greedy and drawn decodes: one pass each over their rows (one launch and one small copy on the card).
    pick(owners, r);
    return;
  } catch (const Error& ex) {
    // A refusal of the batch as a whole comes before any state changed: run the entries one by one so that
    // only the offending one fails. Any other failure may have left states half-advanced: all fail.
    const std::string id = ex.id();
    const bool before_any_change = id == "E_BATCH" || id == "E_PROMPT" || id == "E_CONTEXT_FULL" ||
                                   id == "E_TOKEN_RANGE" || id == "E_STATE_PENDING";
    for (size_t i = 0; i < owners.size(); ++i) {
      if (!before_any_change) {
        owners[i]->error = ex.what();
        continue;
      }
      try {
        ForwardResult one = std::move(model_.forward_batch(backend_, std::span(&batch[i], 1))[0]);
        after_forward(one, *owners[i]);
        catch_up_drafts(std::span(&owners[i], 1));
        pick(std::span(&owners[i], 1), std::span(&one, 1));
      } catch (const std::exception& e) {
        owners[i]->error = e.what();
      }
    }
  } catch (const std::exception& ex) {
    for (StepItem* it : owners) it->error = ex.what();
  }
}

void ModelStepEngine::prefetch(SequenceState& state, std::span<const int32_t> ids) {
  model_.prefetch(backend_, state, ids);
}

struct Scheduler::Slot {
  int id = 0;
  bool busy = false;
  GenRequest req;
  std::shared_ptr<Ticket> ticket;
  uint64_t id_task = 0;
  std::unique_ptr<SequenceState> state;
  int64_t n_prompt_done = 0;  // prompt tokens consumed
  int64_t n_hinted = 0;       // prompt tokens already named to engine prefetch
  int64_t n_decoded = 0;
  int32_t last = -1;            // the token to feed next step (decode phase)
  std::vector<int32_t> feed;    // this step's decode ids: last, then the drafts to verify
  DraftCounts drafts;           // the request's drafted / accepted counts
  double accept_avg = 1.0;      // moving average of the acceptance per draft (adaptive width), optimistic
  int plain_steps = 0;          // steps at width 0 since the last probe
  std::vector<int32_t> recent;  // prompt + generated, for the penalties
  std::mt19937_64 rng;
  Clock::time_point t_start, t_first;
  double prompt_ms = 0.0;
  uint64_t lru = 0;
  bool parked = false;   // waits for its PrefillShare's leader to read the prompt
  int64_t n_cached = 0;  // prompt tokens it took from the leader's prefill or the prompt cache
  // The prompt cache's snapshot of `state` at its last prompt end.
  std::unique_ptr<StateCheckpoint> prompt_end;
  bool prompting() const { return n_prompt_done < static_cast<int64_t>(req.prompt.size()); }
};

Scheduler::Scheduler(StepEngine& engine, SchedulerConfig config, SampleFn sample)
    : engine_(engine), config_(config), sample_(std::move(sample)), draft_cost_(config.spec.draft_cost) {
  for (int i = 0; i < config_.n_slots; ++i) {
    auto s = std::make_unique<Slot>();
    s->id = i;
    slots_.push_back(std::move(s));
  }
  publish_locked();  // no other thread exists yet
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& s : slots_)
    if (s->busy) finish(*s, StopReason::Cancelled);
  for (auto& s : slots_) drop_state(*s);  // kept by the prompt cache
  for (auto& p : queue_) {
    FinishInfo f;
    f.reason = StopReason::Cancelled;
    if (p.request.on_finish) p.request.on_finish(f);
  }
}

std::shared_ptr<Ticket> Scheduler::submit(GenRequest request) {
  std::vector<GenRequest> one;
  one.push_back(std::move(request));
  return submit_all(std::move(one)).front();
}

std::vector<std::shared_ptr<Ticket>> Scheduler::submit_all(std::vector<GenRequest> requests) {
  std::vector<std::shared_ptr<Ticket>> tickets;
  std::vector<Pending> ok;
  for (GenRequest& request : requests) {
    auto ticket = std::make_shared<Ticket>();
    tickets.push_back(ticket);
    std::string refusal;
    if (request.prompt.empty()) refusal = "empty prompt";
    if (static_cast<int64_t>(request.prompt.size()) + 1 > config_.n_ctx_slot)
      refusal = "prompt longer than the slot's context";
    if (request.id_slot >= config_.n_slots) refusal = "id_slot out of range";
    if (!refusal.empty()) {
      FinishInfo f;
      f.reason = StopReason::Error;
      f.error = refusal;
      if (request.on_finish) request.on_finish(f);
      continue;
    }
    ok.push_back(Pending{std::move(request), ticket, 0});
  }
  {
    std::lock_guard lk(mu_);
    for (Pending& p : ok) {
      p.id_task = next_task_++;
      queue_.push_back(std::move(p));
    }
    stats_.requests_deferred = static_cast<int>(queue_.size());
  }
  cv_.notify_all();
  return tickets;
}

// The prompt tokens a request may take from slot `s`: all that its kept state consumed, else all that its
// prompt-end snapshot holds, when they are the start of the prompt and leave at least one token to read (the
// first sample needs a last row of logits); else none. A state with an uncommitted verify, or a shared
// prefill's member, takes nothing.
Scheduler::Reuse Scheduler::reusable_prefix(const Slot& s, const GenRequest& r) {
  if (!s.state || !r.cache_prompt || r.share || s.state->spec.active) return {};
  const auto starts = [&r](const std::vector<int32_t>& h) {
    return !h.empty() && h.size() < r.prompt.size() && std::equal(h.begin(), h.end(), r.prompt.begin());
  };
  const std::vector<int32_t>& h = s.state->history;
  if (static_cast<int64_t>(h.size()) == s.state->pos && starts(h))
    return {static_cast<int64_t>(h.size()), false};
  if (s.prompt_end && starts(s.prompt_end->history))
    return {static_cast<int64_t>(s.prompt_end->history.size()), true};
  return {};
}

// The slot's state and snapshot go back to the engine.
void Scheduler::drop_state(Slot& s) {
  s.prompt_end.reset();
  if (s.state) engine_.release(std::move(s.state));
}

// An admitted slot starts from its kept state, or from its snapshot restored into that state, and skips the
// prompt tokens they hold; else its kept state goes back and step() gives it a fresh one.
void Scheduler::resume_or_drop(Slot& s, Reuse reuse) {
  if (reuse.from_snapshot) {
    try {
      if (!engine_.restore(*s.state, *s.prompt_end)) reuse.n = 0;
    } catch (const std::exception&) {
      reuse.n = 0;  // a restore that failed part way leaves the state unknown: a fresh one reads it all
    }
  }
  if (reuse.n == 0) drop_state(s);
  s.n_prompt_done = s.n_hinted = s.n_cached = reuse.n;
}

// Moves queued requests into idle slots: a request naming a slot waits for that slot; the others take the
// idle slot whose kept state gives the longest prompt prefix (the prompt cache), else the least recently used
// idle slot, in arrival order. What each admitted slot reuses goes to `admitted`, for resume_or_drop to act
// on once the lock is released (it is engine work: a restore, or a release a TP leader tells its ranks of).
bool Scheduler::admit_locked(std::vector<std::function<void(const FinishInfo&)>>& cancelled,
                             std::vector<std::pair<Slot*, Reuse>>& admitted) {
  bool any = false;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->ticket->cancelled()) {
      cancelled.push_back(std::move(it->request.on_finish));
      it = queue_.erase(it);
      stats_.requests_cancelled++;
      continue;
    }
    Slot* target = nullptr;
    Reuse reuse;
    const auto reuse_of = [&](const Slot& s) {
      return config_.cache_prompt ? reusable_prefix(s, it->request) : Reuse{};
    };
    if (it->request.id_slot >= 0) {
      Slot* s = slots_[it->request.id_slot].get();
      if (!s->busy) target = s, reuse = reuse_of(*s);
    } else {
      for (auto& s : slots_) {
        if (s->busy) continue;
        const Reuse r = reuse_of(*s);
        if (!target || r.n > reuse.n || (r.n == reuse.n && s->lru < target->lru)) target = s.get(), reuse = r;
      }
    }
    if (!target) {
      ++it;
      continue;
    }
    Slot& s = *target;
    admitted.emplace_back(&s, reuse);
    s.busy = true;
    s.req = std::move(it->request);
    s.ticket = std::move(it->ticket);
    s.id_task = it->id_task;
    s.n_decoded = 0;
    s.last = -1;
    s.drafts = DraftCounts{};
    s.accept_avg = accept_prior_;
    s.plain_steps = 0;
    s.recent = s.req.prompt;
    s.rng.seed(s.req.sampling.seed);
    s.t_start = Clock::now();
    s.prompt_ms = 0.0;
    s.lru = ++lru_clock_;
    s.n_prompt_done = s.n_hinted = s.n_cached = 0;  // resume_or_drop sets what the prompt cache gives
    s.parked = false;
    if (const auto& sh = s.req.share) {
      if (sh->leader < 0)
        sh->leader = s.id;
      else
        s.parked = true;
    }
    it = queue_.erase(it);
    any = true;
  }
  stats_.requests_deferred = static_cast<int>(queue_.size());
  return any;
}

void Scheduler::finish(Slot& s, StopReason reason, std::string error) {
  FinishInfo f;
  f.reason = reason;
  f.error = std::move(error);
  f.slot = s.id;
  f.n_prompt = static_cast<int64_t>(s.req.prompt.size());
  f.n_predicted = s.n_decoded;
  f.prompt_ms = s.prompt_ms;
  f.predicted_ms = s.n_decoded > 0 ? ms_since(s.t_first) : 0.0;
  f.draft_n = static_cast<int64_t>(s.drafts.drafted_total());
  f.draft_n_accepted = static_cast<int64_t>(s.drafts.accepted_total());
  f.n_cached = s.n_cached;
  // A leader that ends before its prompt is read hands the read to the first member still waiting.
  if (const auto& sh = s.req.share; sh && sh->leader == s.id) {
    sh->leader = -1;
    for (auto& o : slots_)
      if (o->busy && o->parked && o->req.share == sh) {
        o->parked = false;
        sh->leader = o->id;
        break;
      }
  }
  s.parked = false;
  auto cb = std::move(s.req.on_finish);
  s.busy = false;
  // With the prompt cache a state that ended cleanly stays with the slot for a later request that extends
  // its history (reusable_prefix); any other goes back now, not at the slot's next request.
  const bool keep = config_.cache_prompt && s.state && reason != StopReason::Error && !s.state->spec.active;
  if (!keep) drop_state(s);
  s.req = GenRequest{};
  s.ticket.reset();
  s.lru = ++lru_clock_;
  {
    // Gauges and the slot table change before the client hears, so it never sees itself still running.
    std::lock_guard lk(mu_);
    stats_.requests_finished++;
    if (reason == StopReason::Cancelled) stats_.requests_cancelled++;
    int busy = 0;
    for (auto& other : slots_) busy += other->busy;
    stats_.requests_processing = busy;
    publish_locked();
  }
  if (cb) cb(f);
}

void Scheduler::loop() {
  while (true) {
    std::vector<std::function<void(const FinishInfo&)>> cancelled;
    std::vector<std::pair<Slot*, Reuse>> admitted;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] {
        if (stop_) return true;
        bool busy = std::any_of(slots_.begin(), slots_.end(), [](auto& s) { return s->busy; });
        if (busy) return true;
        return !queue_.empty();
      });
      if (stop_) return;
      admit_locked(cancelled, admitted);
      int processing = 0;
      for (auto& s : slots_) processing += s->busy;
      stats_.requests_processing = processing;
      publish_locked();
    }
    FinishInfo f;
    f.reason = StopReason::Cancelled;
    for (auto& cb : cancelled)
      if (cb) cb(f);
    for (auto& [s, reuse] : admitted) resume_or_drop(*s, reuse);
    step();
  }
}

void Scheduler::step() {
  // Cancelled requests leave first, so their slot is free for the next step's admission.
  for (auto& s : slots_)
    if (s->busy && s->ticket->cancelled()) finish(*s, StopReason::Cancelled);

  for (auto& s : slots_) {
    if (!s->busy || s->state) continue;
    try {
      s->state = engine_.new_state(config_.n_ctx_slot);
    } catch (const std::exception& e) {
      finish(*s, StopReason::Error, e.what());
    }
  }

  // Build one pass: every decoding slot's token, then prompt chunks (≤ ubatch each, ≤ batch in all) taken
  // round-robin so several long prompts share the prompt budget.
  std::vector<StepItem> items;
  std::vector<Slot*> owners;
  int64_t prompt_tokens = 0, decode_tokens = 0, decode_items = 0;
  // The drafting slots propose their drafts now, all in one batch (the draft layer's weights read once a
  // draft step for all of them), and verify them with their pending tokens in this pass.
  std::vector<DraftJob> jobs;
  std::vector<Slot*> drafting;
  // With a measured draft cost, a step of a batch size whose plain time is not known (or old) drafts nowhere.
  int decoding = 0;
  for (auto& s : slots_) decoding += s->busy && !s->prompting();
  const bool measure = drafts_configured() && config_.spec.adaptive && config_.spec.measured_cost;
  const bool plain_now = measure && decoding > 0 && draft_cost_.wants_plain(decoding);
  const double row_cost = measure ? draft_cost_.row_cost(decoding) : config_.spec.draft_cost;
  const auto t_step = Clock::now();
  for (auto& s : slots_)
    if (s->busy && !s->prompting() && !plain_now)
      if (const int k = draft_width(*s, row_cost); k > 0) {
        jobs.push_back({s->state.get(), s->last, k, {}});
        drafting.push_back(s.get());
      }
  if (!jobs.empty()) {
    try {
      engine_.draft_batch(jobs);
    } catch (const std::exception& e) {
      for (Slot* s : drafting) finish(*s, StopReason::Error, e.what());
    }
  }
  for (auto& s : slots_) {
    if (!s->busy || s->prompting()) continue;
    std::vector<int32_t> drafts;
    if (auto d = std::find(drafting.begin(), drafting.end(), s.get()); d != drafting.end()) {
      drafts = std::move(jobs[static_cast<size_t>(d - drafting.begin())].drafts);
      const int n_min = s->req.spec_n_min >= 0 ? s->req.spec_n_min : config_.spec.n_min;
      if (static_cast<int>(drafts.size()) < n_min) drafts.clear();
    }
    s->feed.assign(1, s->last);
    s->feed.insert(s->feed.end(), drafts.begin(), drafts.end());
    StepItem it;
    it.state = s->state.get();
    it.ids = s->feed;
    it.want_logits = true;
    it.speculative = !drafts.empty();
    it.argmax_only = !s->req.constrain && argmax_suffices(s->req.sampling);
    const SamplingParams& sp = s->req.sampling;
    if (!s->req.constrain && engine_.draws_rows() && engine_draw_suffices(sp))
      it.draw =
          Backend::RowDraw{static_cast<float>(sp.temperature), sp.top_k, static_cast<float>(sp.top_p),
                           static_cast<float>(sp.min_p),       sp.seed,  static_cast<uint64_t>(s->n_decoded)};
    items.push_back(std::move(it));
    owners.push_back(s.get());
    decode_tokens += static_cast<int64_t>(s->feed.size());
    ++decode_items;
  }
  int64_t budget = config_.n_batch;
  size_t n = slots_.size();
  for (size_t k = 0; k < n && budget > 0; ++k) {
    Slot& s = *slots_[(rr_ + k) % n];
    if (!s.busy || !s.prompting() || s.parked) continue;
    int64_t left = static_cast<int64_t>(s.req.prompt.size()) - s.n_prompt_done;
    int64_t take = std::min({left, config_.n_ubatch, budget});
    StepItem it;
    it.state = s.state.get();
    it.ids = std::span<const int32_t>(s.req.prompt.data() + s.n_prompt_done, static_cast<size_t>(take));
    it.want_logits = take == left;
    items.push_back(std::move(it));
    owners.push_back(&s);
    budget -= take;
    prompt_tokens += take;
  }
  rr_ = (rr_ + 1) % std::max<size_t>(n, 1);
  if (items.empty()) return;

  // Readahead of a prompt's first chunk (later chunks were named at the end of the step before).
  for (size_t i = 0; i < items.size(); ++i)
    if (owners[i]->prompting()) hint(*owners[i], static_cast<int64_t>(items[i].ids.size()));

  // Grammar masks of the decoding slots' current states are computed while the card runs the forward; they
  // are joined before anything samples (take_tokens), so no constraint is touched by two threads at once.
  std::vector<const std::function<void()>*> prepares;
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].want_logits && owners[i]->req.prepare_constraint)
      prepares.push_back(&owners[i]->req.prepare_constraint);
  std::future<void> prepared;
  if (!prepares.empty())
    prepared = std::async(std::launch::async, [&prepares] {
      for (const auto* p : prepares) try {
          (*p)();
        } catch (...) {  // constrain repeats the work and reports the failure where it always has
        }
    });
  auto t0 = Clock::now();
  try {
    engine_.forward(items);
  } catch (...) {
    if (prepared.valid()) prepared.wait();  // the helper reads the slots: it ends before they can go
    throw;
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (prepared.valid()) prepared.get();

  // Counters first, so that a client who sees its request finish also sees it counted.
  {
    uint64_t generated = 0, max_ctx = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].error.empty() || !items[i].want_logits) continue;
      generated++;  // a verify's accepted drafts are counted as they are taken, below
      max_ctx = std::max<uint64_t>(max_ctx, static_cast<uint64_t>(items[i].state->pos) + 1);
    }
    std::lock_guard lk(mu_);
    stats_.n_decode_total++;
    stats_.n_busy_slots_total += items.size();
    double total = static_cast<double>(prompt_tokens + decode_tokens);
    stats_.prompt_tokens_total += static_cast<uint64_t>(prompt_tokens);
    stats_.prompt_seconds_total += total > 0 ? secs * prompt_tokens / total : 0.0;
    stats_.tokens_predicted_total += generated;
    stats_.tokens_predicted_seconds_total += total > 0 ? secs * decode_tokens / total : 0.0;
    stats_.n_tokens_max = std::max(stats_.n_tokens_max, max_ctx);
  }

  for (size_t i = 0; i < items.size(); ++i) {
    Slot& s = *owners[i];
    StepItem& it = items[i];
    if (!it.error.empty()) {
      finish(s, StopReason::Error, it.error);
      continue;
    }
    bool was_prompt = s.prompting();
    if (was_prompt) s.n_prompt_done += static_cast<int64_t>(it.ids.size());
    if (!it.want_logits) continue;
    if (was_prompt) {
      s.prompt_ms = ms_since(s.t_start);
      s.t_first = Clock::now();
      if (config_.cache_prompt && s.req.cache_prompt && !s.req.share) {
        // One snapshot a slot, at the newest prompt end; the older one's memory goes first.
        s.prompt_end.reset();
        try {
          s.prompt_end = engine_.snapshot(*s.state);
        } catch (const std::exception&) {
          // No snapshot (out of memory): the live state is still kept for the next turn.
        }
      }
      if (s.req.share && s.req.share->leader == s.id) fork_followers(s, it);  // before its state can go
    }
    take_tokens(s, it);
  }
  // A decode-only step's time, from its first draft pass to its last token, prices the next steps' drafts.
  if (measure && prompt_tokens == 0 && decode_items > 0 && decode_items == decoding)
    draft_cost_.record(decoding, decode_tokens - decode_items,
                       std::chrono::duration<double>(Clock::now() - t_step).count());

  // Readahead: a prompt still being read names its next chunk now (the state has moved past this one), so
  // what that chunk reads is fetched while the scheduler samples and the next pass starts.
  for (auto& s : slots_)
    if (s->busy && s->prompting() && !s->parked)
      hint(*s, std::min({static_cast<int64_t>(s->req.prompt.size()) - s->n_prompt_done, config_.n_ubatch,
                         config_.n_batch}));

  std::lock_guard lk(mu_);
  int busy = 0;
  for (auto& s : slots_) busy += s->busy;
  stats_.requests_processing = busy;
  publish_locked();
}

// How many drafts the slot verifies this step: never more than the request may still emit (a round emits up
// to k + 1) or the state can hold (k + 1 rows).
bool Scheduler::drafts_configured() const {
  return config_.spec.n_max > 0 && engine_.drafting();
}

int Scheduler::draft_width(Slot& s, double row_cost) const {
  if (!drafts_configured()) return 0;
  int64_t k = std::min(config_.spec.n_max, kMaxDrafts);
  if (s.req.spec_n_max >= 0) k = std::min<int64_t>(k, s.req.spec_n_max);
  if (config_.spec.adaptive) k = std::min<int64_t>(k, adaptive_width(s, row_cost));
  k = std::min(k, s.state->capacity - s.state->pos - 1);
  if (s.req.n_predict >= 0) k = std::min(k, s.req.n_predict - s.n_decoded - 1);
  return static_cast<int>(std::max<int64_t>(k, 0));
}

// The width that pays best for the slot's measured acceptance (SpecConfig::adaptive); 1 as a probe every
// probe_every steps while it is 0.
int Scheduler::adaptive_width(Slot& s, double row_cost) const {
  const double p = std::clamp(s.accept_avg, 0.0, 0.999);
  int best = 0;
  double best_rate = 1.0;  // width 0: one token per plain step
  for (int k = 1; k <= std::min(config_.spec.n_max, kMaxDrafts); ++k) {
    const double tokens = (1.0 - std::pow(p, k + 1)) / (1.0 - p);
    const double rate = tokens / (1.0 + row_cost * k);
    if (rate > best_rate * 1.0001) best = k, best_rate = rate;
  }
  if (best > 0) {
    s.plain_steps = 0;
    return best;
  }
  if (++s.plain_steps >= config_.spec.probe_every) {
    s.plain_steps = 0;
    return 1;
  }
  return 0;
}

// The tokens of one decode item: one token per row, drawn by the request's own sampler from that row (its
// penalties seeing the tokens taken so far, drafts included); a verify's row j accepts draft j when the draw
// is the draft. The first mismatch, an EOS, a stop or the limit ends the round, and the engine keeps exactly
// the rows that were fed for the tokens taken (never one past an EOS).
//
// Lossless for greedy and sampled requests alike: the drafts are deterministic (q one-hot), and "draw x ~ p,
// accept iff x = d, else emit x" accepts d with probability p(d) and, on a reject, emits from p with d
// removed and renormalised: the speculative-sampling rule min(1, p/q) with its residual for a one-hot q.
// Each emitted token takes one draw, as without drafting: from the slot's host generator, or the engine's
// draw keyed by the request's seed and the token's index (a verify's row j at the round's first index + j),
// so a seeded request gives the same tokens with drafting on or off wherever the verify rows' logits equal
// the decode's, however drafting pauses and resumes.
void Scheduler::take_tokens(Slot& s, StepItem& it) {
  const SamplingParams& sp = s.req.sampling;
  const int64_t V = engine_.vocab_size();
  const int64_t rows = static_cast<int64_t>(it.ids.size());
  const int64_t n_drafts = it.speculative ? rows - 1 : 0;
  DraftCounts round;
  if (n_drafts > 0) round.rounds = 1;
  for (int64_t j = 0; j < n_drafts; ++j) round.drafted[j] = 1;
  auto account = [&] {
    if (n_drafts > 0) {  // each draft verified moves the average by its outcome, until the first reject
      for (int64_t j = 0; j < n_drafts; ++j) {
        const double a = static_cast<double>(round.accepted[j]);
        s.accept_avg = 0.9 * s.accept_avg + 0.1 * a;
        accept_prior_ = 0.9 * accept_prior_ + 0.1 * a;
        if (!round.accepted[j]) break;
      }
    }
    s.drafts.add(round);
    std::lock_guard lk(mu_);
    stats_.drafts.add(round);
    int64_t extra = 0;
    for (uint64_t a : round.accepted) extra += static_cast<int64_t>(a);
    stats_.tokens_predicted_total += static_cast<uint64_t>(extra);
  };
  for (int64_t j = 0; j < (it.speculative ? rows : 1); ++j) {
    std::span<const float> row(it.logits);
    if (it.speculative) row = row.subspan(static_cast<size_t>(j * V), static_cast<size_t>(V));
    int64_t look = sp.repeat_last_n < 0 ? static_cast<int64_t>(s.recent.size())
                                        : std::min<int64_t>(sp.repeat_last_n, s.recent.size());
    // A grammar masks each row before it is sampled (its state follows on_token), so a draft that leaves
    // the grammar can never be the sampled token and is rejected like any mismatch.
    std::vector<float> masked;
    if (s.req.constrain) {
      masked.assign(row.begin(), row.end());
      s.req.constrain(masked);
      row = masked;
    }
    SampledToken tok;
    if (it.speculative && !it.verify_picks.empty())  // the engine's pick of the row: its argmax or draw
      tok.id = it.verify_picks.at(static_cast<size_t>(j));
    else if (it.logits.empty() && it.argmax >= 0)  // the engine's pick: what the sampler would draw here
      tok.id = it.argmax;
    else
      tok = sample_(row, sp, std::span<const int32_t>(s.recent).last(look), s.rng);
    const bool accepted = j < n_drafts && tok.id == it.ids[j + 1];
    if (accepted) round.accepted[j] = 1;
    s.n_decoded++;
    s.recent.push_back(tok.id);
    StopReason stop = StopReason::None;
    bool eos = !s.req.ignore_eos &&
               std::find(s.req.eos_ids.begin(), s.req.eos_ids.end(), tok.id) != s.req.eos_ids.end();
    if (eos) {
      stop = StopReason::Eos;
    } else if (s.req.on_token && !s.req.on_token(tok)) {
      stop = StopReason::Word;
    } else if (s.req.n_predict >= 0 && s.n_decoded >= s.req.n_predict) {
      stop = StopReason::Limit;
    }
    if (stop != StopReason::None) {
      // A draft matched at the stop token counts as not accepted: the round ends there like a correction.
      if (accepted) round.accepted[j] = 0;
      account();
      // The rows fed for the tokens taken (the stop token itself is not fed) are kept when the prompt cache
      // keeps the state; otherwise it goes with the slot and nothing needs committing.
      if (it.speculative && config_.cache_prompt) {
        try {
          engine_.commit(*s.state, j + 1);
        } catch (const std::exception&) {
          drop_state(s);  // the request still ends as it stopped; its state is not kept
        }
      }
      finish(s, stop);
      return;
    }
    if (accepted) continue;
    if (it.speculative) {
      try {
        engine_.commit(*s.state, j + 1);
      } catch (const std::exception& e) {  // a TP group that failed since the forward: the request ends
        account();
        finish(s, StopReason::Error, e.what());
        return;
      }
    }
    account();
    // The sampled token still has to be fed: it needs one more position.
    if (s.state->pos + 1 > config_.n_ctx_slot) {
      finish(s, StopReason::ContextFull);
      return;
    }
    s.last = tok.id;
    return;
  }
}

// The leader has read the shared prompt: every member waiting in a slot starts from a copy of its state and
// samples its first token from the same last-position logits with its own sampler and seed. A member the
// engine cannot copy to reads the prompt itself.
void Scheduler::fork_followers(Slot& leader, const StepItem& it) {
  const auto share = leader.req.share;
  share->leader = -1;
  for (auto& o : slots_) {
    Slot& f = *o;
    if (!f.busy || !f.parked || f.req.share != share) continue;
    f.parked = false;
    if (!f.state || f.req.prompt != leader.req.prompt) continue;  // reads its own prompt
    bool copied = false;
    try {
      copied = engine_.copy_state(*leader.state, *f.state);
    } catch (const std::exception&) {
      // A copy that failed part way (out of memory for the draft queue) leaves the state unknown: a fresh
      // one reads the prompt itself.
      try {
        f.state = engine_.new_state(config_.n_ctx_slot);
      } catch (const std::exception& e) {
        finish(f, StopReason::Error, e.what());
      }
      continue;
    }
    if (!copied) continue;
    f.n_prompt_done = static_cast<int64_t>(f.req.prompt.size());
    f.n_hinted = f.n_prompt_done;
    f.n_cached = f.n_prompt_done;
    f.prompt_ms = ms_since(f.t_start);
    f.t_first = Clock::now();
    StepItem fi;
    fi.state = f.state.get();
    fi.ids = it.ids;
    fi.want_logits = true;
    fi.logits = it.logits;
    {
      std::lock_guard lk(mu_);
      stats_.tokens_predicted_total++;  // its first token, sampled outside any pass
    }
    take_tokens(f, fi);
  }
}

// Names the prompt chunk of `take` tokens that the slot's next forward reads, once.
void Scheduler::hint(Slot& s, int64_t take) {
  if (take <= 0 || s.n_hinted >= s.n_prompt_done + take) return;
  s.n_hinted = s.n_prompt_done + take;
  try {
    engine_.prefetch(
        *s.state, std::span<const int32_t>(s.req.prompt.data() + s.n_prompt_done, static_cast<size_t>(take)));
  } catch (const std::exception&) {
    // A hint only: the forward itself reports any real problem.
  }
}

// The slot table other threads read (/slots): a copy taken under the lock, since the scheduler thread
// changes the slots themselves without it.
void Scheduler::publish_locked() {
  published_.clear();
  for (auto& s : slots_) {
    SlotInfo i;
    i.id = s->id;
    i.n_ctx = config_.n_ctx_slot;
    i.is_processing = s->busy;
    if (s->busy) {
      i.id_task = s->id_task;
      i.n_prompt = static_cast<int64_t>(s->req.prompt.size());
      i.n_past = s->state ? s->state->pos : 0;
      i.n_decoded = s->n_decoded;
      i.n_remain = s->req.n_predict < 0 ? -1 : s->req.n_predict - s->n_decoded;
      i.params = s->req.sampling;
      i.drafts = s->drafts;
    }
    published_.push_back(i);
  }
}

std::vector<SlotInfo> Scheduler::slots() const {
  std::lock_guard lk(mu_);
  return published_;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

}  // namespace bloomery
