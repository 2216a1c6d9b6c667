// TpStepEngine: rank 0's scheduler steps as step plans (step_plan.h), and the heartbeat watchdog.
#include "parallel/tp_step_engine.h"

#include <cstdio>

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/step_plan.h"

namespace bloomery {

TpStepEngine::TpStepEngine(Communicator& comm, Model& model, Backend& backend,
                           std::chrono::milliseconds heartbeat)
    : c_(comm), local_(model, backend), heartbeat_(heartbeat) {
  beat_ = std::thread([this] { heartbeat_loop(); });
}

TpStepEngine::~TpStepEngine() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  beat_.join();
}

std::string TpStepEngine::failure() const {
  std::lock_guard lk(failure_mu_);
  return failure_;
}

void TpStepEngine::fail(const std::string& why) {
  {
    std::lock_guard lk(failure_mu_);
    if (!failure_.empty()) return;
    failure_ = why;
  }
  std::fprintf(stderr, "bloomery: tensor-parallel group failed: %s\n", why.c_str());
  c_.abort(why);  // the other ranks stop at once instead of at their deadline
}

int64_t TpStepEngine::id_of(const SequenceState* s) {
  std::lock_guard lk(ids_mu_);
  return ids_.at(s);
}

void TpStepEngine::release(std::unique_ptr<SequenceState> state) {
  std::lock_guard lk(ids_mu_);
  auto it = ids_.find(state.get());
  if (it == ids_.end()) return;
  released_.push_back(it->second);
  ids_.erase(it);
}

void TpStepEngine::send_released() {
  std::vector<int64_t> gone, freed;
  {
    std::lock_guard lk(ids_mu_);
    gone.swap(released_);
  }
  {
    std::lock_guard lk(snapshots_->mu);
    freed.swap(snapshots_->freed);
  }
  for (int64_t id : gone) send_plan(c_, kPlanDropState, id, {}, {});
  for (int64_t id : freed) send_plan(c_, kPlanDropSnapshot, id, {}, {});
}

std::unique_ptr<SequenceState> TpStepEngine::new_state(int64_t capacity) {
  std::lock_guard lk(mu_);
  if (const std::string f = failure(); !f.empty())
    raise("E_TP_RANK_FAILED", Where{"", "", "--tp"}, "every rank alive", "the group failed: " + f);
  const int64_t id = next_id_++;
  try {
    send_released();
    const int64_t cap[1] = {capacity};
    send_plan(c_, kPlanNewState, id, cap, {});
  } catch (const std::exception& e) {
    fail(e.what());
    throw;
  }
  std::unique_ptr<SequenceState> s = local_.new_state(capacity);
  std::lock_guard ids(ids_mu_);
  ids_[s.get()] = id;
  return s;
}

void TpStepEngine::forward(std::span<StepItem> items) {
  std::lock_guard lk(mu_);
  auto fail_all = [&](const std::string& why) {
    for (StepItem& it : items) it.error = why;
  };
  if (const std::string f = failure(); !f.empty())
    return fail_all("E_TP_RANK_FAILED: the tensor-parallel group failed: " + f);
  std::vector<int64_t> meta;
  std::vector<int32_t> ids;
  for (const StepItem& it : items) {
    meta.insert(meta.end(), {id_of(it.state), int64_t(it.ids.size()),
                             int64_t(it.want_logits ? 1 : 0) | int64_t(it.speculative ? 2 : 0)});
    ids.insert(ids.end(), it.ids.begin(), it.ids.end());
  }
  try {
    send_released();
    send_plan(c_, kPlanForward, int64_t(items.size()), meta, ids);
  } catch (const std::exception& e) {
    fail(e.what());
    return fail_all(e.what());
  }
  local_.forward(items);
  // The step engine turns every error into its items' errors: a collective's (E_TP_*) is the group's end,
  // and the request in flight carries it to its client.
  for (const StepItem& it : items)
    if (it.error.find("E_TP_") != std::string::npos) return fail(it.error);
}

void TpStepEngine::enable_drafting(DraftOptions options) {
  std::lock_guard lk(mu_);
  ngram_ = options.source == DraftOptions::Source::Ngram;
  const int64_t n_max[1] = {options.n_max};
  send_plan(c_, kPlanDrafting, int64_t(options.source), n_max, {});
  local_.enable_drafting(ngram_ ? std::move(options) : tp_draft_options(c_, std::move(options)));
}

template <typename Local>
void TpStepEngine::on_every_rank(int64_t kind, int64_t arg, std::span<const int64_t> seqs, Local&& local) {
  std::lock_guard lk(mu_);
  if (const std::string f = failure(); !f.empty())
    raise("E_TP_RANK_FAILED", Where{"", "", "--tp"}, "every rank alive", "the group failed: " + f);
  try {
    send_released();
    send_plan(c_, kind, arg, seqs, {});
    local();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("E_TP_") != std::string::npos) fail(e.what());
    throw;
  }
}

std::vector<int32_t> TpStepEngine::draft(SequenceState& state, int32_t pending, int k) {
  DraftJob job{&state, pending, k, {}};
  draft_batch(std::span(&job, 1));
  return job.drafts;
}

void TpStepEngine::draft_batch(std::span<DraftJob> jobs) {
  if (ngram_) return local_.draft_batch(jobs);
  std::vector<int64_t> seqs;
  for (const DraftJob& j : jobs) seqs.insert(seqs.end(), {id_of(j.state), int64_t(j.pending), int64_t(j.k)});
  on_every_rank(kPlanDraft, int64_t(jobs.size()), seqs, [&] { local_.draft_batch(jobs); });
}

void TpStepEngine::commit(SequenceState& state, int64_t n) {
  const int64_t args[1] = {n};
  on_every_rank(kPlanCommit, id_of(&state), args, [&] { local_.commit(state, n); });
}

bool TpStepEngine::copy_state(SequenceState& from, SequenceState& to) {
  const int64_t ids[2] = {id_of(&from), id_of(&to)};
  on_every_rank(kPlanCopyState, 0, ids, [&] { local_.copy_state(from, to); });
  return true;
}

std::unique_ptr<StateCheckpoint> TpStepEngine::snapshot(SequenceState& state) {
  int64_t id = 0;
  {
    std::lock_guard lk(snapshots_->mu);
    id = snapshots_->next_id++;
  }
  std::unique_ptr<StateCheckpoint> cp;
  const int64_t seq[1] = {id_of(&state)};
  try {
    on_every_rank(kPlanSnapshot, id, seq, [&] { cp = local_.snapshot(state); });
  } catch (...) {
    std::lock_guard lk(snapshots_->mu);
    snapshots_->freed.push_back(id);  // the other ranks may hold theirs: freed with the next plan
    throw;
  }
  std::lock_guard lk(snapshots_->mu);
  snapshots_->ids[cp.get()] = id;
  cp->on_free = std::shared_ptr<void>(nullptr, [book = snapshots_, key = cp.get(), id](void*) {
    std::lock_guard lk(book->mu);
    book->ids.erase(key);
    book->freed.push_back(id);
  });
  return cp;
}

bool TpStepEngine::restore(SequenceState& state, const StateCheckpoint& snapshot) {
  int64_t id = 0;
  {
    std::lock_guard lk(snapshots_->mu);
    const auto it = snapshots_->ids.find(&snapshot);
    if (it == snapshots_->ids.end()) return false;  // not one of this engine's snapshots
    id = it->second;
  }
  const int64_t seq[1] = {id_of(&state)};
  on_every_rank(kPlanRestore, id, seq, [&] { local_.restore(state, snapshot); });
  return true;
}

void TpStepEngine::heartbeat_loop() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, heartbeat_);
    if (stopping_ || !failure().empty()) continue;
    try {
      send_plan(c_, kPlanHeartbeat, 0, {}, {});
      c_.barrier("heartbeat");
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
}

}  // namespace bloomery
