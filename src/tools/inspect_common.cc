// Labels and JSON shared by inspect and tensor.
#include "tools/inspect_common.h"

namespace bloomery::tools {

std::string record_format_label(const WeightRecord& r) {
  if (r.kind != RecordKind::Weight && !r.main.empty()) {
    DType d = r.main.front()->dtype;
    if (d != DType::BF16 && d != DType::F16 && d != DType::F32) return std::string(dtype_name(d));
  }
  if (r.skipped && r.kind == RecordKind::Param) return std::string(dtype_name(r.main.front()->dtype));
  return std::string(format_name(r.format));
}

const char* record_kind_name(RecordKind k) {
  switch (k) {
    case RecordKind::Weight:
      return "weight";
    case RecordKind::Param:
      return "param";
    case RecordKind::KvScale:
      return "kv_scale";
  }
  return "?";
}

uint64_t record_params(const WeightRecord& r) {
  uint64_t n = 1;
  for (uint64_t s : r.shape) n *= s;
  return n;
}

nlohmann::json record_dtypes_json(const WeightRecord& r) {
  nlohmann::json d = nlohmann::json::object();
  if (!r.main.empty()) d["main"] = std::string(dtype_name(r.main.front()->dtype));
  auto part = [&](const char* key, const TensorEntry* t) {
    if (t) d[key] = std::string(dtype_name(t->dtype));
  };
  part("block_scale", r.block_scale);
  if (!r.block_scale_shards.empty()) part("block_scale", r.block_scale_shards.front());
  part("csf_fixed", r.csf_fixed);
  part("csf_exceptions", r.csf_exceptions);
  part("global_scale", r.global_scale);
  part("input_scale", r.input_scale);
  return d;
}

std::vector<std::string> record_tensor_names(const WeightRecord& r) {
  std::vector<std::string> out;
  for (const TensorEntry* t : r.main) out.push_back(t->name);
  for (const TensorEntry* t : r.block_scale_shards) out.push_back(t->name);
  for (const TensorEntry* t : {r.block_scale, r.csf_fixed, r.csf_exceptions, r.global_scale, r.input_scale})
    if (t) out.push_back(t->name);
  return out;
}

std::string dtypes_label(const nlohmann::json& dtypes) {
  std::string s;
  for (const char* key :
       {"main", "block_scale", "csf_fixed", "csf_exceptions", "global_scale", "input_scale"})
    if (dtypes.contains(key)) s += (s.empty() ? "" : "+") + dtypes[key].get<std::string>();
  return s;
}

std::string shape_label(const nlohmann::json& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i].get<uint64_t>());
  return s + "]";
}

nlohmann::json plan_json(const QuantPlan& p) {
  nlohmann::json rules = nlohmann::json::array();
  for (const auto& r : p.rules) rules.push_back({{"key", r.key}, {"scheme", r.scheme.describe()}});
  nlohmann::json excl = nlohmann::json::array();
  for (const auto& e : p.exclusions) excl.push_back(e.text);
  return {
      {"source", std::string(plan_source_name(p.source))},
      {"quant_method", p.quant_method},
      {"quant_algo", p.quant_algo},
      {"default", p.default_scheme.describe()},
      {"rules", rules},
      {"exclusions", excl},
      {"kv_cache_scheme", p.kv_cache_scheme},
      {"producer", p.producer_name + (p.producer_version.empty() ? "" : " " + p.producer_version)},
      {"expert_scale_encoding", p.expert_scale_encoding == ScaleEncoding::NvFp4Csf ? "nvfp4_csf" : "plain"}};
}

std::string plan_summary(const QuantPlan& p) {
  if (p.source == PlanSource::None) return "none (every tensor as stored)";
  std::string s = std::string(plan_source_name(p.source));
  if (!p.quant_algo.empty()) s += ", quant_algo " + p.quant_algo;
  s += ", default " + p.default_scheme.describe();
  if (!p.rules.empty()) s += fmt::format(", {} rules", p.rules.size());
  if (!p.exclusions.empty()) s += fmt::format(", {} exclusions", p.exclusions.size());
  if (!p.kv_cache_scheme.empty()) s += ", kv cache " + p.kv_cache_scheme;
  if (!p.producer_name.empty()) s += ", producer " + p.producer_name + " " + p.producer_version;
  if (p.expert_scale_encoding == ScaleEncoding::NvFp4Csf) s += ", expert scales nvfp4_csf";
  return s;
}

}  // namespace bloomery::tools
