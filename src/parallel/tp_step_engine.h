// The server's step engine on rank 0 of a tensor-parallel group: every scheduler call (a new sequence state,
// a forward over the step's items, a state released) is first sent to the other ranks as a step plan, which
// they run on their own shards (tp_follow); rank 0 then runs it and samples from the gathered logits.
//
// Watchdog (serving.md R-5): while the server is idle a heartbeat (a barrier under --collective-timeout-ms)
// runs every `heartbeat` interval, so a dead or hung rank is found without a request. Once any collective
// fails the group is done: failure() names the rank and the collective, the request in flight gets that
// error, and every later forward and new state fails at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/scheduler.h"

namespace bloomery {

class TpStepEngine final : public StepEngine {
 public:
  TpStepEngine(Communicator& comm, Model& model, Backend& backend, std::chrono::milliseconds heartbeat);
  ~TpStepEngine() override;  // stops the heartbeat (the group's owner stops the followers)

  int64_t vocab_size() const override { return local_.vocab_size(); }
  std::unique_ptr<SequenceState> new_state(int64_t capacity) override;
  void forward(std::span<StepItem> items) override;
  void prefetch(SequenceState& state, std::span<const int32_t> ids) override { local_.prefetch(state, ids); }
  void release(std::unique_ptr<SequenceState> state) override;
  // Drafting under TP: every rank runs the draft layer on its shard (its collectives) and takes rank 0's
  // drafts (tp_draft_options); n-gram drafts are rank 0's alone. Commits after a verify go to every rank.
  void enable_drafting(DraftOptions options);
  bool drafting() const override { return local_.drafting(); }
  std::vector<int32_t> draft(SequenceState& state, int32_t pending, int k) override;
  void draft_batch(std::span<DraftJob> jobs) override;
  void commit(SequenceState& state, int64_t n) override;
  // The prompt cache and shared prefills: every rank copies, snapshots and restores its own shard of the
  // state; a snapshot freed on rank 0 is freed on the others with the next plan.
  bool copy_state(SequenceState& from, SequenceState& to) override;
  std::unique_ptr<StateCheckpoint> snapshot(SequenceState& state) override;
  bool restore(SequenceState& state, const StateCheckpoint& snapshot) override;

  // "" while every rank is healthy; else why the group failed (the first collective error).
  std::string failure() const;

 private:
  void fail(const std::string& why);  // under mu_: records the first failure and stops the other ranks
  void send_released();               // under mu_: the states released since the last plan
  int64_t id_of(const SequenceState* s);
  void heartbeat_loop();
  // Sends one plan (under mu_), then runs `local` here; a collective's failure fails the group.
  template <typename Local>
  void on_every_rank(int64_t kind, int64_t arg, std::span<const int64_t> seqs, Local&& local);

  Communicator& c_;
  ModelStepEngine local_;
  std::mutex ids_mu_;  // release() may come while a plan is being sent
  std::map<const SequenceState*, int64_t> ids_;
  std::vector<int64_t> released_;
  int64_t next_id_ = 1;
  std::mutex mu_;  // one plan at a time: the scheduler's steps and the heartbeat
  // failure_ has its own lock: /health reads it while a step (or a hung collective) holds mu_.
  mutable std::mutex failure_mu_;
  std::string failure_;
  std::chrono::milliseconds heartbeat_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread beat_;
  bool ngram_ = false;  // n-gram drafts: rank 0 proposes alone, no draft plan
  // Rank 0's snapshots by their plan ids, and the ids of those freed since the last plan. Shared with each
  // snapshot's on_free, which may run after this engine is gone.
  struct Snapshots {
    std::mutex mu;
    std::map<const StateCheckpoint*, int64_t> ids;
    std::vector<int64_t> freed;
    int64_t next_id = 1;
  };
  std::shared_ptr<Snapshots> snapshots_ = std::make_shared<Snapshots>();
};

}  // namespace bloomery
