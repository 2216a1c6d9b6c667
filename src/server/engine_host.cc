#include "server/engine_host.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/select/backend_choice.h"
#include "core/file.h"
#include "formats/format_table.h"
#include "models/kv_cache_type.h"
#include "models/model_loader.h"
#include "models/model_registry.h"
#include "models/roles.h"
#include "server/checkpoint_checks.h"
#include "server/sampling.h"

namespace bloomery::server {

namespace {

DraftOptions draft_options(const SchedulerConfig& config) {
  DraftOptions d;
  d.n_max = config.spec.n_max;
  d.p_min = config.spec.p_min;
  if (config.spec.ngram) d.source = DraftOptions::Source::Ngram;
  return d;
}

}  // namespace

std::unique_ptr<EngineHost> EngineHost::prepare(const ServerOptions& o) {
  auto h = std::unique_ptr<EngineHost>(new EngineHost());
  h->folder_ = o.model;
  if (!std::filesystem::is_directory(h->folder_))
    raise("E_FOLDER_NOT_FOUND", Where{o.model, "", ""}, "a model folder", "no such directory");
  // The engine: -dev none → CPU, cuda0 → CUDA (refused now if the family's ops are not on the card), auto →
  // CUDA when this build has it, a device is present and the family runs on it.
  h->layout_ = resolve_tp(TpFlags{o.tp, o.nodes, o.node_rank, o.collective_timeout_ms});
  // Under TP as without it: auto takes CUDA ranks where the family runs on the card (verified on the H200:
  // the one-GPU loopback against TP 1 on three fixtures, NCCL's calls with a world of one, glm5_next --tp 2
  // in the bench, docs/performance.md), CPU ranks otherwise.
  const BackendPick pick =
      pick_backend(o.device == "none" ? "cpu" : (o.device == "cuda0" ? "cuda" : "auto"), h->folder_);
  h->backend_name_ = pick.name;
  h->backend_why_ = pick.why;
  check_backend_runs(pick.name, h->folder_);
  // Open, headers, formats, declarations and every weight's header checks, and the memory plan against the
  // engine's memory (the card's free memory, or the host's for the CPU engine): nothing is allocated yet.
  Backend::MemoryInfo mem;
  if (pick.name == "cuda") {
    // This process's GPU: a --nodes rank r (one process per GPU, --tp-launch processes) plans against GPU r.
    h->backend_ = make_backend("cuda", 0, h->layout_.nodes.empty() ? 0 : h->layout_.rank);
    mem = h->backend_->memory_info();
  } else {
    mem = cpu::CpuBackend(1).memory_info();
  }
  // Every check serve runs before loading, the same function `bloomery inspect` runs.
  h->kv_type_ = kv_cache_type(o.cache_type_k, o.cache_type_v);
  CheckedCheckpoint checked = check_checkpoint(h->folder_, pick.name, mem, o.chat_template_file, h->kv_type_);
  h->lm_ = std::move(checked.lm);
  h->tokenizer_ = std::move(checked.tokenizer);
  h->template_ = std::move(checked.chat_template);
  const LoadedModel& lm = *h->lm_;
  const Model& model = *lm.model;
  const std::filesystem::path cfg_dir = lm.source->config_dir();
  // --chat-template names a built-in template that replaces the checkpoint's (checked above).
  if (!o.chat_template.empty())
    h->template_.emplace(
        ChatTemplate::from_source(builtin_chat_template(o.chat_template), "--chat-template"));
  const std::string& src = h->template_->source();
  h->think_tags_ = src.find("<think>") != std::string::npos && src.find("</think>") != std::string::npos;
  std::filesystem::path gen = cfg_dir / "generation_config.json";
  if (std::filesystem::exists(gen))
    h->generation_config_ = nlohmann::json::parse(read_text_file(gen), nullptr, false);

  // EOS: the model's config ids plus the tokenizer's (tokenizer_config, generation_config).
  h->eos_ids_ = model.info().eos_ids;
  for (int32_t id : h->tokenizer_->eos_ids())
    if (std::find(h->eos_ids_.begin(), h->eos_ids_.end(), id) == h->eos_ids_.end()) h->eos_ids_.push_back(id);

  CheckpointSummary& s = h->summary_;
  s.family = lm.config.model_type;
  s.folder_kind = std::string(folder_kind_name(lm.source->kind()));
  RoleContext rc = role_context_from_config(lm.source->config());
  std::map<std::string, std::set<std::string>> fmts;
  for (const auto& r : lm.checkpoint.weights) {
    if (r.skipped) continue;
    std::string role(role_name(role_of(r.name, rc)));
    uint64_t b = r.stored_bytes();
    s.bytes_by_role[role] += b;
    std::string f = r.kind == RecordKind::Weight ? std::string(format_name(r.format)) : "param";
    fmts[role].insert(f);
    s.bytes_by_format[f] += b;
    s.stored_bytes += b;
  }
  for (auto& [role, set] : fmts) {
    std::string joined;
    for (const auto& f : set) joined += (joined.empty() ? "" : " + ") + f;
    s.formats_by_role[role] = joined;
  }
  for (const WeightJob& j : lm.jobs) {
    if (j.streamed || !j.record) continue;
    const uint64_t n = j.record->rows() * j.record->cols();
    s.engine_weight_bytes += n * 4;
    s.n_params += static_cast<int64_t>(n);
  }
  s.n_tensors = lm.source->tensors().size();
  s.max_positions = model.info().max_positions;
  s.vocab_size = model.info().vocab_size;
  s.hidden_size = model.info().hidden_size;
  s.warnings = lm.warnings.summary();
  return h;
}

uint64_t EngineHost::state_bytes_estimate(int64_t ctx) const {
  return lm_->model->state_bytes(ctx);
}

MemoryPlan EngineHost::memory_plan(int64_t context, int64_t sequences, int64_t ubatch, bool drafting,
                                   bool prompt_cache) const {
  MemoryPlan p = lm_->plan;
  MemoryPlanOptions opts;
  opts.context = context;
  opts.sequences = sequences;
  opts.ubatch = ubatch;
  if (drafting) opts.spec_per_sequence = lm_->model->spec_bytes();
  if (prompt_cache) opts.snapshot_per_sequence = lm_->model->spec_bytes();
  plan_finish(p, lm_->model->state_bytes(context), p.scratch, p.free_bytes, p.total_bytes, opts);
  return p;
}

void EngineHost::load(const SchedulerConfig& config, int threads,
                      const std::function<void(size_t, size_t)>& progress) {
  if (layout_.distributed()) return load_ranks(config, threads, progress);
  if (!backend_) backend_ = std::make_unique<cpu::CpuBackend>(threads);
  // The loader draws its byte progress bar on stderr and reports (bytes read, total) to `progress`, from its
  // reader threads.
  LoadOptions lo;
  if (progress) {
    progress(0, 1);
    lo.on_progress = [&progress](uint64_t done, uint64_t total) {
      progress(static_cast<size_t>(done), static_cast<size_t>(total));
    };
  }
  load_weights(*lm_, *backend_, lo);  // then binds the model
  if (progress) progress(1, 1);
  auto step = std::make_unique<ModelStepEngine>(*lm_->model, *backend_);
  if (config.spec.n_max > 0) {
    if (!config.spec.ngram && !lm_->model->info().has_draft)
      raise("E_SPEC_NO_DRAFT", Where{lm_->folder, missing_draft_tensors(*lm_), "--spec-type"},
            "a checkpoint with its MTP/NextN draft layer", "none", "start without --spec-type draft-mtp");
    step->enable_drafting(draft_options(config));
  }
  step_ = std::move(step);
  scheduler_ = std::make_unique<Scheduler>(*step_, config, sample_token);
}

void EngineHost::use_nodes(const std::string& nodes, int rank) {
  layout_ = resolve_tp(TpFlags{layout_.size, nodes, rank, static_cast<int>(layout_.timeout.count())});
}

// --tp/--nodes: every rank loads its slices (the checked, prepared model stays for info and the start
// screen); rank 0's scheduler steps through a TpStepEngine, whose heartbeat watches the ranks while idle.
void EngineHost::load_ranks(const SchedulerConfig& config, int threads,
                            const std::function<void(size_t, size_t)>& progress) {
  LoadOptions lo;
  lo.plan.context = config.n_ctx_slot;
  lo.plan.sequences = config.n_slots;
  lo.plan.ubatch = config.n_ubatch;
  // Each rank refuses a draft layer it cannot hold (missing, or not cut by its formats) before allocating.
  lo.require_draft = config.spec.n_max > 0 && !config.spec.ngram;
  lo.kv_type = kv_type_;
  if (progress) {
    progress(0, 1);
    lo.on_progress = [&progress](uint64_t done, uint64_t total) {
      progress(static_cast<size_t>(done), static_cast<size_t>(total));
    };
  }
  group_ = std::make_unique<TpGroup>(
      layout_, folder_, lo, [this](int n, int rank) { return make_backend(backend_name_, n, rank); },
      threads);
  if (progress) progress(1, 1);
  if (layout_.distributed())
    std::fprintf(stderr, "parallel    rank %d of %d: collectives %s\n", layout_.rank, layout_.size,
                 group_->collectives().c_str());
  if (group_->follower()) return;
  // Heartbeats often enough that a dead rank is named within a deadline and a half of going quiet, and that
  // the followers, which wait for plans under the deadline, always get one in time.
  const auto beat =
      std::clamp(layout_.timeout / 2, std::chrono::milliseconds(1), std::chrono::milliseconds(5000));
  auto step =
      std::make_unique<TpStepEngine>(*group_->comm(), *group_->model().model, group_->backend(), beat);
  if (config.spec.n_max > 0) step->enable_drafting(draft_options(config));
  tp_step_ = step.get();
  step_ = std::move(step);
  scheduler_ = std::make_unique<Scheduler>(*step_, config, sample_token);
}

}  // namespace bloomery::server
