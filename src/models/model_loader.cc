// load_model: TensorSource → resolve_checkpoint → declarations checked → every weight's header checked and
// the memory plan made (nothing allocated yet) → plan checked → weights loaded (bulk or one by one) → bind.
#include "models/model_loader.h"

#include <chrono>
#include <map>
#include <set>

#include "formats/weight_decode.h"
#include "formats/weight_slice.h"
#include "models/model_registry.h"
#include "models/roles.h"

namespace bloomery {

namespace {

// A TP rank's part: the cut fits the stored tensor (the format's cut units) and the declared shape.
void check_declared_cut(const TensorDecl& d, const WeightRecord& r) {
  check_cut(r, d.cut);
  int64_t want = 1;
  for (int64_t x : d.shape) want *= x;
  const bool rows = d.cut.axis == TensorCut::Axis::Rows;
  const uint64_t have = rows ? d.cut.count() * r.cols() : r.rows() * d.cut.count();
  if (d.shape.empty() || uint64_t(want) != have)
    raise("E_DENSE_SHAPE", Where{"", d.name, "shape"}, shape_string(d.shape),
          fmt::format("{} elements in the rank's {} of {}", have, rows ? "rows" : "columns",
                      shape_string(std::vector<int64_t>(r.shape.begin(), r.shape.end()))));
}

}  // namespace

std::vector<const WeightRecord*> match_declarations(const std::vector<TensorDecl>& decls,
                                                    const std::vector<WeightRecord>& records,
                                                    std::string* optional_dropped) {
  std::map<std::string_view, const WeightRecord*> by_name;
  for (const WeightRecord& r : records) by_name[r.name] = &r;
  std::vector<const WeightRecord*> out;
  out.reserve(decls.size());
  std::string dropped;
  for (const TensorDecl& d : decls) {
    auto it = by_name.find(d.name);
    if (it == by_name.end()) {
      if (!d.optional)
        raise("E_MODEL_TENSOR_MISSING", Where{"", d.name, ""},
              d.shape.empty() ? "a tensor" : "a tensor of shape " + shape_string(d.shape), "none");
      out.push_back(nullptr);
      continue;
    }
    const WeightRecord& r = *it->second;
    if (!d.cut.whole()) {
      try {
        check_declared_cut(d, r);
      } catch (const Error& e) {
        // The optional tensors are the draft layer (TensorDecl::optional): one that cannot be cut drops the
        // whole layer below, the model itself still loads.
        if (!d.optional || !optional_dropped) throw;
        if (dropped.empty()) dropped = e.what();
      }
    } else if (!d.shape.empty()) {
      std::vector<int64_t> stored(r.shape.begin(), r.shape.end());
      int64_t want = 1, have = 1;
      for (int64_t x : d.shape) want *= x;
      for (int64_t x : stored) have *= x;
      // Exact dims when the ranks agree; equal element counts otherwise (e.g. A_log [H] vs [1, 1, H, 1]).
      bool ok = stored.size() == d.shape.size() ? stored == d.shape : want == have;
      if (!ok)
        raise("E_DENSE_SHAPE", Where{"", d.name, "shape"}, shape_string(d.shape), shape_string(stored));
    }
    out.push_back(&r);
  }
  if (!dropped.empty()) {
    for (size_t i = 0; i < decls.size(); ++i)
      if (decls[i].optional) out[i] = nullptr;
    *optional_dropped = dropped;
  }
  return out;
}

std::string LoadStats::summary() const {
  std::string s = fmt::format("{} in {:.2f} s, {:.2f} GB/s ({}, {} reader thread{}", format_bytes(bytes),
                              seconds, gb_per_s(), path, threads, threads == 1 ? "" : "s");
  if (direct_bytes) s += fmt::format(", {} direct", format_bytes(direct_bytes));
  return s + ")";
}

namespace {

int64_t cfg_int(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// The widest MLP activation of a token: dense intermediate, or top-k routed experts (+ the shared expert).
int64_t mlp_width(const nlohmann::json& text) {
  const int64_t dense = cfg_int(text, "intermediate_size");
  const int64_t moe =
      cfg_int(text, "moe_intermediate_size") * std::max<int64_t>(1, cfg_int(text, "num_experts_per_tok"));
  const int64_t shared = cfg_int(text, "shared_expert_intermediate_size");
  return std::max(dense, moe + shared);
}

}  // namespace

std::unique_ptr<LoadedModel> prepare_model(const std::filesystem::path& folder, std::string_view backend_name,
                                           Backend::MemoryInfo memory, const LoadOptions& options) {
  auto lm = std::make_unique<LoadedModel>();
  lm->folder = folder.string();
  lm->source = std::make_unique<TensorSource>(TensorSource::open(folder, lm->warnings));
  std::vector<std::string> names;
  names.reserve(lm->source->tensors().size());
  for (const TensorEntry& t : lm->source->tensors()) names.push_back(t.name);
  lm->config = read_model_config(lm->source->config(), names);
  lm->config.tp_rank = options.tp_rank;
  lm->config.tp_size = options.tp_size;
  lm->config.comm = options.comm;
  lm->config.kv_type = options.kv_type;
  lm->model = create_model(lm->config);
  lm->checkpoint = resolve_checkpoint(*lm->source, lm->warnings);
  const std::vector<TensorDecl> decls = lm->model->declare();
  const std::vector<const WeightRecord*> recs =
      match_declarations(decls, lm->checkpoint.weights, &lm->draft_dropped);
  if (options.require_draft) {
    // Shipped: any of its tensors found (some are optional within the layer, e.g. GLM's own NextN head; bind
    // decides on the rest).
    bool found = false;
    std::string missing;
    for (size_t i = 0; i < decls.size(); ++i) {
      if (!decls[i].optional) continue;
      found = found || recs[i];
      if (!recs[i] && missing.empty()) missing = decls[i].name;
    }
    if (!lm->draft_dropped.empty()) missing.clear();
    if (!found)
      raise("E_SPEC_NO_DRAFT", Where{lm->folder, missing, "--spec-type"},
            "a checkpoint with its MTP/NextN draft layer",
            lm->draft_dropped.empty() ? "none"
                                      : "a draft layer that cannot be cut over " +
                                            std::to_string(options.tp_size) + " ranks: " + lm->draft_dropped,
            "start without --spec-type draft-mtp");
  }
  if (!lm->draft_dropped.empty())
    lm->warnings.add("W_TP_NO_DRAFT", Where{"", "", "--tp"},
                     "the draft layer is not loaded under --tp " + std::to_string(options.tp_size) + ": " +
                         lm->draft_dropped);

  MemoryPlan& plan = lm->plan;
  plan.backend = std::string(backend_name);
  plan.keeping = keeping_for_backend(backend_name);
  const RoleContext roles = role_context_from_config(lm->source->config());
  // The header pass runs the format layer's own checks on a zero-row window of every weight (dtypes, part
  // sizes, companions, CSF geometry, global scales). Its warnings are the load's again: a scratch sink.
  Warnings header_warnings;
  for (size_t i = 0; i < decls.size(); ++i) {
    const WeightRecord* r = recs[i];
    if (!r) continue;
    const TensorDecl& d = decls[i];
    WeightJob job;
    job.name = d.name;
    job.record = r;
    job.shape = d.shape.empty() ? std::vector<int64_t>(r->shape.begin(), r->shape.end()) : d.shape;
    job.streamed = d.streamed;
    job.cut = d.cut;
    job.read_bytes = r->stored_bytes();
    int64_t numel = 1;
    for (int64_t x : job.shape) numel *= x;
    const uint64_t full = r->rows() * r->cols();
    if (!d.cut.whole()) job.read_bytes = job.read_bytes * uint64_t(numel) / std::max<uint64_t>(full, 1);
    if (d.cut.whole() && static_cast<uint64_t>(numel) != full)
      raise("E_DENSE_SHAPE", Where{"", r->name, "shape"}, shape_string(job.shape),
            shape_string(std::vector<int64_t>(r->shape.begin(), r->shape.end())));
    WeightBytes header;
    if (!decodes_to_f32(*r)) {
      header = load_weight_rows(*lm->source, *r, 0, 0, header_warnings).bytes;
      header.rows = r->rows();
      header.main = header.block_scale = header.global_scale = header.input_scale = {};
    }
    if (d.streamed) {
      plan.host_tables +=
          job.read_bytes;  // read row by row from the checkpoint / page cache, never on the card
    } else {
      job.backend_bytes = plan.keeping == WeightKeeping::DecodedF32
                              ? static_cast<uint64_t>(numel) * 4
                              : stored_layout(*r, header, numel).total();
      plan_add_weight(plan, plan_group(role_of(d.name, roles)), job.backend_bytes);
      plan.read_bytes += job.read_bytes;
    }
    lm->jobs.push_back(std::move(job));
  }
  const ModelInfo& info = lm->model->info();
  const MemoryPlanOptions& po = options.plan;
  plan_finish(plan, lm->model->state_bytes(po.context),
              scratch_estimate(info.vocab_size, info.hidden_size, mlp_width(lm->config.text), po.ubatch),
              memory.free_bytes, memory.total_bytes, po);
  return lm;
}

void load_weights(LoadedModel& lm, Backend& backend, const LoadOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  Progress progress("loading " + std::filesystem::path(lm.folder).filename().string(), lm.plan.read_bytes,
                    options.progress);
  if (options.on_progress) progress.set_listener(options.on_progress);
  std::vector<const WeightJob*> loaded;
  std::vector<WeightJob> bulk_jobs;
  for (const WeightJob& j : lm.jobs) {
    if (j.streamed) {
      lm.weights.put(j.name, backend.stream_weight(*lm.source, *j.record, lm.warnings));
    } else if (!j.cut.whole()) {  // a TP slice: only its byte ranges are read, decoded here
      const std::vector<float> data = decode_weight_slice(*lm.source, *j.record, j.cut, lm.warnings);
      lm.weights.put(j.name, backend.upload_weight(j.name, data, j.shape));
      progress.add(j.read_bytes);
    } else {
      bulk_jobs.push_back(j);
    }
  }
  LoadStats& st = lm.stats;
  BulkLoadFn bulk = options.bulk ? find_bulk_loader(backend.name()) : nullptr;
  if (bulk) {
    BulkLoadContext ctx{*lm.source, bulk_jobs, lm.warnings, progress, st, options.reader_threads};
    std::vector<Weight> ws = bulk(backend, ctx);
    if (ws.size() != bulk_jobs.size())
      raise("E_INTERNAL_LOADER", Where{lm.folder, "", ""}, std::to_string(bulk_jobs.size()) + " weights",
            std::to_string(ws.size()));
    for (size_t i = 0; i < ws.size(); ++i) lm.weights.put(bulk_jobs[i].name, std::move(ws[i]));
  } else {
    for (const WeightJob& j : bulk_jobs) {
      lm.weights.put(j.name, backend.load_weight(*lm.source, *j.record, j.shape, lm.warnings));
      progress.add(j.read_bytes);
    }
  }
  st.bytes = progress.done();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress.finish();
  lm.model->bind(backend, lm.weights);
}

std::unique_ptr<LoadedModel> load_model(const std::filesystem::path& folder, Backend& backend,
                                        const LoadOptions& options) {
  std::unique_ptr<LoadedModel> lm = prepare_model(folder, backend.name(), backend.memory_info(), options);
  if (options.on_plan) options.on_plan(lm->plan);
  check_memory_plan(lm->plan, lm->folder);
  load_weights(*lm, backend, options);
  return lm;
}

}  // namespace bloomery

namespace bloomery {

std::string missing_draft_tensors(const LoadedModel& lm) {
  std::set<std::string> found;
  for (const WeightJob& j : lm.jobs) found.insert(j.name);
  std::vector<std::string> missing;
  for (const TensorDecl& d : lm.model->declare())
    if (d.optional && !found.count(d.name)) missing.push_back(d.name);
  std::string out;
  for (size_t i = 0; i < missing.size() && i < 6; ++i) out += (i ? ", " : "") + missing[i];
  if (missing.size() > 6) out += ", … (" + std::to_string(missing.size()) + " in all)";
  return out;
}

}  // namespace bloomery
