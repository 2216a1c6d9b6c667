// The ranks of one tensor-parallel run, as `bloomery run`, `bloomery bench` and `bloomery-serve` set them up
// (--tp N, --nodes host:port,… --node-rank R, --collective-timeout-ms): one rank (no TP), N CPU ranks as
// threads of this process (LocalTpRanks), or this process's rank among several (SocketComm). Rank 0 drives
// through the Engine-like calls or, for the server's scheduler, through comm() (TpStepEngine); a process
// with rank > 0 only follows rank 0's step plans (follow()).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/model_loader.h"
#include "parallel/local_ranks.h"
#include "parallel/socket_comm.h"
#include "parallel/step_plan.h"
#include "runtime/engine.h"

namespace bloomery {

// The TP flags as the command line gave them.
struct TpFlags {
  int tp = 1;
  std::string nodes;  // --nodes: "" = every rank in this process
  int node_rank = 0;  // --node-rank
  int collective_timeout_ms = 10000;
};

// The flags checked: the world size (--tp, or the number of --nodes), this process's rank and the addresses.
// Throws E_TP_NODES when --tp and --nodes disagree or --node-rank is not one of the nodes.
struct TpLayout {
  int size = 1;
  int rank = 0;
  std::vector<NodeAddress> nodes;  // empty: every rank in this process
  std::chrono::milliseconds timeout{10000};
  bool distributed() const { return size > 1 || !nodes.empty(); }
};
TpLayout resolve_tp(const TpFlags& flags);

// The threads each rank's backend gets: ranks in this process share `threads` (0 = every core); a process of
// --nodes, or a single rank, keeps them all.
int rank_threads(const TpLayout& layout, int threads);

class TpGroup {
 public:
  // A rank's backend: `threads` CPU workers, `rank` its TP rank (a CUDA backend picks its GPU from it).
  using MakeBackend = std::function<std::unique_ptr<Backend>(int threads, int rank)>;
  // Loads the model on every rank this process holds. `threads`: the process's CPU threads (0 = every
  // core), shared out between in-process ranks. Throws the load's errors (E_TP_CUT before anything loads).
  TpGroup(const TpLayout& layout, const std::filesystem::path& folder, LoadOptions options,
          const MakeBackend& make_backend, int threads);
  // The same with each rank's model from `load` (a model built in memory: `bench --synthetic`). With
  // --nodes every process calls it for its own rank, so it must give every process the same model.
  TpGroup(const TpLayout& layout, LoadRank load, LoadOptions options, const MakeBackend& make_backend,
          int threads);
  ~TpGroup();  // a group torn down by an exception tells the other processes why
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  int size() const { return layout_.size; }
  int rank() const { return layout_.rank; }
  // This process is a rank > 0 of --nodes: it serves nothing and runs follow().
  bool follower() const { return net_ && layout_.rank != 0; }
  // `heartbeats`: rank 0 runs a TpStepEngine, whose heartbeats let the wait for its plans have a deadline.
  void follow(bool heartbeats = false);

  Backend& backend() { return ranks_ ? ranks_->backend() : *backend_; }
  LoadedModel& model() { return ranks_ ? ranks_->model() : *lm_; }
  // How this rank's collectives move data (Backend::join_tp; "" without TP): the start screen's line.
  const std::string& collectives() const { return ranks_ ? ranks_->collectives() : collectives_; }
  // Rank 0's communicator (null without TP): the server's step engine sends its plans through it.
  Communicator* comm();

  // Engine calls on rank 0, run by every rank (`bloomery run` and `bloomery bench`).
  SeqId add_sequence(int64_t capacity);
  void remove_sequence(SeqId id);
  std::vector<float> prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits = false);
  std::vector<std::vector<float>> decode(std::span<const SeqId> seqs, std::span<const int32_t> ids);
  // Tells --nodes followers that rank 0 is done (the in-process ranks stop when the group is destroyed).
  void stop();

 private:
  TpLayout layout_;
  std::unique_ptr<SocketComm> net_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LoadedModel> lm_;
  std::unique_ptr<LocalTpRanks> ranks_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<TpLeader> leader_;
  std::string collectives_;  // --nodes: this process's rank (in-process ranks: LocalTpRanks keeps rank 0's)
  bool stopped_ = false;
};

}  // namespace bloomery
