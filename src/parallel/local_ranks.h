// N tensor-parallel ranks in one process (`bloomery run --tp N` on the CPU, and the CI tests): rank r owns
// a backend, its slices of the model (LoadOptions.tp_rank) and an Engine. The caller drives rank 0 through
// this class's Engine-like calls; before running each call rank 0 broadcasts its step plan (what to run, on
// which sequences, with which ids) and the other ranks, each on its own thread, run the same call. Nothing
// comes back from them but through the model's collectives, so every rank's results are rank 0's.
//
// The same plan-then-follow shape is what one process per GPU needs (docs/serving.md, "Tensor parallel").
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "models/model_loader.h"
#include "parallel/step_plan.h"
#include "parallel/thread_group.h"
#include "runtime/engine.h"

namespace bloomery {

// How one rank gets its model: `options` carries its tp_rank, tp_size and communicator. A folder's slices
// (load_model), or a model built in memory (`bloomery bench --synthetic … --tp N`). Called on the rank's own
// thread, for every rank at once.
using LoadRank = std::function<std::unique_ptr<LoadedModel>(Backend& backend, const LoadOptions& options)>;
LoadRank load_folder(const std::filesystem::path& folder);

class LocalTpRanks {
 public:
  using MakeBackend = std::function<std::unique_ptr<Backend>(int rank)>;
  // Loads the model on every rank (each on its own thread, at once). Throws the first rank's load error
  // (E_TP_CUT and the like come from rank 0's own load, before anything is allocated).
  LocalTpRanks(int size, std::chrono::milliseconds collective_timeout, const std::filesystem::path& folder,
               LoadOptions options, const MakeBackend& make_backend);
  LocalTpRanks(int size, std::chrono::milliseconds collective_timeout, LoadRank load, LoadOptions options,
               const MakeBackend& make_backend);
  ~LocalTpRanks();  // tells the followers to stop and joins them
  LocalTpRanks(const LocalTpRanks&) = delete;
  LocalTpRanks& operator=(const LocalTpRanks&) = delete;

  int size() const { return size_; }
  LoadedModel& model() { return *lm0_; }  // rank 0's (tokenizer folder, warnings, info)
  Backend& backend() { return *be0_; }
  Communicator& comm() { return group_.rank(0); }  // rank 0's: the server's step engine plans through it
  const std::string& collectives() const { return collectives_; }  // rank 0's Backend::join_tp line

  SeqId add_sequence(int64_t capacity);
  void remove_sequence(SeqId id);
  std::vector<float> prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits = false);
  std::vector<std::vector<float>> decode(std::span<const SeqId> seqs, std::span<const int32_t> ids);

 private:
  void stop() noexcept;

  int size_;
  ThreadGroup group_;
  std::unique_ptr<Backend> be0_;
  std::unique_ptr<LoadedModel> lm0_;
  std::unique_ptr<Engine> engine0_;
  std::unique_ptr<TpLeader> leader_;
  std::vector<std::thread> followers_;
  std::vector<std::exception_ptr> follower_errors_;
  std::string collectives_;
  bool stopped_ = false;
};

}  // namespace bloomery
