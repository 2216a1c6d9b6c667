// Everything the routes need from the model: the folder checked and described before HTTP starts (prepare,
// through the loader's prepare_model: every structural error surfaces here, by name, and the memory plan is
// made before anything is allocated), then the weights loaded with the loader's progress bar (load), then the
// tokenizer, chat template and scheduler that requests use.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/classify.h"
#include "formats/tensor_source.h"
#include "models/memory_plan.h"
#include "models/model.h"
#include "models/model_loader.h"
#include "parallel/tp_group.h"
#include "parallel/tp_step_engine.h"
#include "runtime/scheduler.h"
#include "server/flags.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace bloomery::server {

// What the start screen prints about the checkpoint.
struct CheckpointSummary {
  std::string family;                                  // model_type
  std::string folder_kind;                             // sharded / single file / CSF
  std::map<std::string, uint64_t> bytes_by_role;       // stored bytes per role
  std::map<std::string, std::string> formats_by_role;  // "NVFP4 + BF16"
  std::map<std::string, uint64_t> bytes_by_format;
  uint64_t stored_bytes = 0;
  uint64_t engine_weight_bytes = 0;  // what the CPU engine keeps (f32 per logical element)
  int64_t n_params = 0;
  int64_t max_positions = 0;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  size_t n_tensors = 0;
  std::vector<std::string> warnings;
};

class EngineHost {
 public:
  // Reads config, headers, formats, tokenizer and template; builds the model object (no weights yet).
  // Throws bloomery::Error on any structural problem.
  static std::unique_ptr<EngineHost> prepare(const ServerOptions& options);

  const CheckpointSummary& summary() const { return summary_; }
  // The engine's backend ("cpu" or "cuda") and what decided it (-dev, or the automatic choice).
  const std::string& backend_name() const { return backend_name_; }
  const std::string& backend_why() const { return backend_why_; }
  // The K/V caches' element type (-ctk/-ctv).
  ElemType kv_type() const { return kv_type_; }
  // How decode steps reach the device ("" for the CPU engine or before the backend exists).
  std::string decode_steps() const { return backend_ ? backend_->decode_steps() : std::string(); }
  // Per-slot state bytes for `ctx` tokens: what the model's new_state will allocate (Model::state_bytes;
  // before the weights are bound an optional draft layer's cache is counted).
  uint64_t state_bytes_estimate(int64_t ctx) const;
  // The loader's memory plan for `sequences` slots of `context` tokens each (weights as the CPU engine keeps
  // them, KV/state from Model::state_bytes, scratch) against the host's available memory.
  // prompt_cache: the scheduler's prompt-end snapshots are counted (SchedulerConfig::cache_prompt).
  MemoryPlan memory_plan(int64_t context, int64_t sequences, int64_t ubatch, bool drafting = false,
                         bool prompt_cache = false) const;

  // Loads every declared weight (the loader's progress bar on stderr); progress(bytes read, total) as they
  // arrive, possibly from several threads. Then binds and starts the scheduler.
  void load(const SchedulerConfig& config, int threads, const std::function<void(size_t, size_t)>& progress);

  // Tensor parallelism (--tp, --nodes): the world size, whether this process only follows rank 0 (a
  // --nodes rank > 0: no HTTP; follow() runs rank 0's plans until it stops or fails), and the group's
  // failure ("" while every rank is healthy, or without TP): /health and new requests answer 503 with it.
  int tp_size() const { return layout_.size; }
  // Makes this process rank `rank` of --nodes `nodes` (--tp-launch processes: rank 0 after starting the
  // others), before load. Throws E_TP_NODES as resolve_tp does.
  void use_nodes(const std::string& nodes, int rank);
  bool follower() const { return group_ && group_->follower(); }
  void follow() { group_->follow(true); }  // rank 0's heartbeats: a stalled rank 0 is named here too
  std::string failure() const { return tp_step_ ? tp_step_->failure() : std::string(); }

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat_template() const { return *template_; }
  const ModelInfo& info() const { return lm_->model->info(); }
  Scheduler& scheduler() { return *scheduler_; }
  const std::filesystem::path& folder() const { return folder_; }
  // The template's generation prompt opens a think block ("<think>" right before the reply), so the reply
  // starts inside the reasoning.
  bool think_tags() const { return think_tags_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  nlohmann::json generation_config() const { return generation_config_; }

 private:
  void load_ranks(const SchedulerConfig& config, int threads,
                  const std::function<void(size_t, size_t)>& progress);

  std::filesystem::path folder_;
  std::unique_ptr<LoadedModel> lm_;  // prepared (source, records, model, plan), then loaded
  std::optional<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> template_;
  bool think_tags_ = false;
  std::vector<int32_t> eos_ids_;
  nlohmann::json generation_config_;
  CheckpointSummary summary_;

  std::string backend_name_ = "cpu", backend_why_;
  ElemType kv_type_ = ElemType::F32;
  std::unique_ptr<Backend>
      backend_;  // made in prepare for CUDA (its free memory feeds the plan), in load for CPU
  TpLayout layout_;
  std::unique_ptr<TpGroup> group_;   // with --tp/--nodes: the ranks (outlives the step engine)
  TpStepEngine* tp_step_ = nullptr;  // step_, when it is one
  std::unique_ptr<StepEngine> step_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace bloomery::server
