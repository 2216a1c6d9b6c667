#include "server/engine_host.h"

#include <algorithm>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "backend/cpu/cpu_backend.h"
#include "core/file.h"
#include "formats/format_table.h"
#include "models/model_loader.h"
#include "models/model_registry.h"
#include "models/roles.h"
#include "server/sampling.h"

namespace bloomery::server {

std::unique_ptr<EngineHost> EngineHost::prepare(const ServerOptions& o) {
  auto h = std::unique_ptr<EngineHost>(new EngineHost());
  h->folder_ = o.model;
  if (!std::filesystem::is_directory(h->folder_))
    raise("E_FOLDER_NOT_FOUND", Where{o.model, "", ""}, "a model folder", "no such directory");
  h->source_ = std::make_unique<TensorSource>(TensorSource::open(h->folder_, h->warnings_));
  ResolvedCheckpoint resolved = resolve_checkpoint(*h->source_, h->warnings_);
  h->records_ = std::move(resolved.weights);

  std::vector<std::string> names;
  for (const auto& t : h->source_->tensors()) names.push_back(t.name);
  h->config_ = read_model_config(h->source_->config(), names);
  h->model_ = create_model(h->config_);
  h->decls_ = h->model_->declare();

  // Every declared tensor must exist with the declared shape before any byte is read (the loader's check).
  h->matched_ = match_declarations(h->decls_, h->records_);

  const std::filesystem::path cfg_dir = h->source_->config_dir();
  h->tokenizer_.emplace(Tokenizer::from_folder(cfg_dir));
  if (!o.chat_template_file.empty())
    h->template_.emplace(
        ChatTemplate::from_source(read_text_file(o.chat_template_file), o.chat_template_file));
  else
    h->template_.emplace(ChatTemplate::from_folder(cfg_dir));
  const std::string& src = h->template_->source();
  h->think_tags_ = src.find("<think>") != std::string::npos && src.find("</think>") != std::string::npos;
  std::filesystem::path gen = cfg_dir / "generation_config.json";
  if (std::filesystem::exists(gen))
    h->generation_config_ = nlohmann::json::parse(read_text_file(gen), nullptr, false);

  // EOS: the model's config ids plus the tokenizer's (tokenizer_config, generation_config).
  h->eos_ids_ = h->model_->info().eos_ids;
  for (int32_t id : h->tokenizer_->eos_ids())
    if (std::find(h->eos_ids_.begin(), h->eos_ids_.end(), id) == h->eos_ids_.end()) h->eos_ids_.push_back(id);

  CheckpointSummary& s = h->summary_;
  s.family = h->config_.model_type;
  s.folder_kind = std::string(folder_kind_name(h->source_->kind()));
  RoleContext rc = role_context_from_config(h->source_->config());
  std::map<std::string, std::set<std::string>> fmts;
  for (const auto& r : h->records_) {
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
  for (size_t i = 0; i < h->decls_.size(); ++i) {
    const WeightRecord* r = h->matched_[i];
    if (!r || h->decls_[i].streamed) continue;
    uint64_t n = r->rows() * r->cols();
    s.engine_weight_bytes += n * 4;
    s.n_params += static_cast<int64_t>(n);
  }
  s.n_tensors = h->source_->tensors().size();
  s.max_positions = h->model_->info().max_positions;
  s.vocab_size = h->model_->info().vocab_size;
  s.hidden_size = h->model_->info().hidden_size;
  s.warnings = h->warnings_.summary();
  return h;
}

uint64_t EngineHost::state_bytes_estimate(int64_t ctx) const {
  return model_->state_bytes(ctx);
}

void EngineHost::load(const SchedulerConfig& config, int threads,
                      const std::function<void(size_t, size_t)>& progress) {
  backend_ = std::make_unique<cpu::CpuBackend>(threads);
  for (size_t i = 0; i < decls_.size(); ++i) {
    const TensorDecl& d = decls_[i];
    if (const WeightRecord* r = matched_[i]) {
      std::vector<int64_t> shape = d.shape;
      if (shape.empty())
        for (uint64_t x : r->shape) shape.push_back(static_cast<int64_t>(x));
      Weight w = d.streamed ? backend_->stream_weight(*source_, *r, warnings_)
                            : backend_->load_weight(*source_, *r, shape, warnings_);
      weights_.put(d.name, std::move(w));
    }
    if (progress) progress(i + 1, decls_.size());
  }
  model_->bind(*backend_, weights_);
  step_ = std::make_unique<ModelStepEngine>(*model_, *backend_);
  scheduler_ = std::make_unique<Scheduler>(*step_, config, sample_token);
}

}  // namespace bloomery::server
