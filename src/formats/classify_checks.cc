// Cross-record checks of the classification: plan reconciliation, roles, expert stacks, CSF inventory, PLE
// rows.
#include "formats/classify_checks.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace bloomery {

namespace {

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool is_dense_format(FormatId f) {
  return f == FormatId::BF16 || f == FormatId::F16 || f == FormatId::F32;
}

int64_t config_int(const nlohmann::json& tc, std::initializer_list<const char*> keys) {
  if (!tc.is_object()) return 0;
  for (const char* k : keys)
    if (tc.contains(k) && tc[k].is_number_integer()) return tc[k].get<int64_t>();
  return 0;
}

std::string file_of(const ClassifyOptions& o, const TensorEntry* t) {
  return t && o.file_of ? o.file_of(*t) : std::string();
}
Where at(const ClassifyOptions& o, const WeightRecord& r, std::string field = {}) {
  return {file_of(o, r.main.empty() ? nullptr : r.main.front()), r.name, std::move(field)};
}

std::string leaf_of(std::string_view name) {
  size_t dot = name.rfind('.');
  return std::string(dot == std::string_view::npos ? name : name.substr(dot + 1));
}

}  // namespace

bool parse_expert_module(std::string_view module, std::string* container, int* expert, std::string* proj) {
  size_t pos = module.rfind(".experts.");
  if (pos == std::string_view::npos) return false;
  std::string_view rest = module.substr(pos + 9);
  size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 9) return false;
  int e = 0;
  auto r = std::from_chars(rest.data(), rest.data() + dot, e);
  if (r.ec != std::errc() || r.ptr != rest.data() + dot) return false;
  std::string_view p = rest.substr(dot + 1);
  if (p.empty() || p.find('.') != std::string_view::npos) return false;
  if (container) *container = std::string(module.substr(0, pos + 8));
  if (expert) *expert = e;
  if (proj) *proj = std::string(p);
  return true;
}

bool is_draft_module(std::string_view module, const nlohmann::json& text_config) {
  if (starts_with(module, "mtp.") || module == "mtp") return true;
  int64_t layers = config_int(text_config, {"num_hidden_layers"});
  if (layers <= 0) return false;
  std::string needle = "layers." + std::to_string(layers) + ".";
  size_t pos = module.find(needle);
  return pos != std::string_view::npos && (pos == 0 || module[pos - 1] == '.');
}

void reconcile_with_plan(WeightRecord& r, const Prediction& predicted, const ClassifyOptions& options,
                         Warnings& warnings) {
  const QuantScheme& p = predicted.scheme;
  const bool tensor_quant = !is_dense_format(r.format);
  if (!p.quantized && !tensor_quant) return;
  if (p.quantized && !tensor_quant) {
    warnings.add("W_Q_PLAN_SAYS_QUANT_TENSOR_DENSE", at(options, r),
                 "plan predicts " + p.describe() + " (" + predicted.why + "), tensors are " +
                     std::string(format_name(r.format)) + "; loaded dense");
    return;
  }
  if (!p.quantized) {
    warnings.add(
        "W_Q_PLAN_SAYS_DENSE_TENSOR_QUANT", at(options, r),
        "plan predicts dense (" + predicted.why + "), tensors are " + std::string(format_name(r.format)));
    return;
  }
  if (p.format == FormatId::NVFP4 && r.format == FormatId::W4A16_NVFP4) {
    warnings.add("W_NVFP4_INPUT_SCALE_MISSING", at(options, r, "input_scale"),
                 "no input_scale under an NVFP4 plan: the module runs W4A16 only");
    return;
  }
  if (p.format == FormatId::W4A16_NVFP4 && r.format == FormatId::NVFP4) {
    warnings.add("W_W4A16_INPUT_SCALE_IGNORED", at(options, r, "input_scale"),
                 "input_scale present under a W4A16_NVFP4 plan; ignored");
    r.format = FormatId::W4A16_NVFP4;
    return;
  }
  if (p.format == r.format) return;
  raise("E_Q_PLAN_FORMAT_CONFLICT", at(options, r), p.describe() + " (" + predicted.why + ")",
        std::string(format_name(r.format)));
}

void check_role_quantisable(const std::vector<WeightRecord>& records, const ClassifyOptions& options) {
  for (const auto& r : records) {
    if (r.kind != RecordKind::Weight || r.skipped || is_dense_format(r.format)) continue;
    std::string leaf = leaf_of(r.name);
    if (is_norm_or_conv(r.module) || leaf == "A_log" || leaf == "dt_bias" ||
        leaf == "e_score_correction_bias")
      raise("E_Q_ROLE_NOT_QUANTISABLE", at(options, r), "a high-precision (BF16/F16/F32) tensor",
            std::string(format_name(r.format)), "norms, convolutions, A_log and dt_bias are never quantised");
  }
}

void check_csf_inventory(const std::vector<WeightRecord>& records, const QuantPlan& plan,
                         const ClassifyOptions& options) {
  bool any = plan.expert_scale_encoding == ScaleEncoding::NvFp4Csf;
  for (const auto& r : records) any = any || r.scale_encoding == ScaleEncoding::NvFp4Csf;
  if (!any) return;
  static const std::set<std::string> kProjections = {"gate_proj", "up_proj", "down_proj"};
  // expert module "<container>.<e>" → projection → record
  std::map<std::string, std::map<std::string, const WeightRecord*>> experts;
  for (const auto& r : records) {
    if (r.kind != RecordKind::Weight || r.skipped) continue;
    const bool csf = r.scale_encoding == ScaleEncoding::NvFp4Csf;
    std::string container, proj;
    int e = 0;
    const bool expert = parse_expert_module(r.module, &container, &e, &proj);
    const bool draft = is_draft_module(r.module, options.text_config);
    if (csf && (!expert || !kProjections.count(proj)))
      raise("E_CSF_INVENTORY", at(options, r), "CSF scales only on routed-expert gate/up/down projections",
            "CSF scales on '" + r.module + "'");
    if (csf && draft)
      raise("E_CSF_INVENTORY", at(options, r), "plain scales on the draft layer's experts",
            "CSF scales on a draft (MTP/NextN) expert");
    if (!expert || draft) continue;
    if (!csf && !is_dense_format(r.format))
      raise("E_CSF_INVENTORY", at(options, r), "CSF-coded scales on every routed expert of a CSF checkpoint",
            std::string(format_name(r.format)) + " with plain scales");
    if (csf) experts[container + "." + std::to_string(e)][proj] = &r;
  }
  for (const auto& [expert, projs] : experts) {
    std::set<std::string> have;
    for (const auto& [p, r] : projs) have.insert(p);
    if (have != kProjections) {
      std::string found;
      for (const auto& p : have) found += (found.empty() ? "" : ", ") + p;
      raise("E_CSF_PROJECTIONS", at(options, *projs.begin()->second), "gate_proj, up_proj and down_proj",
            found.empty() ? "none" : found, "expert '" + expert + "'");
    }
    if (!options.read) continue;
    std::map<std::string, std::vector<uint8_t>> globals;
    for (const auto& [p, r] : projs) {
      for (const TensorEntry* t : {r->global_scale, r->input_scale}) {
        if (!t) continue;
        std::vector<uint8_t> bytes = options.read(*t);
        float v = NAN;
        if (t->dtype == DType::F32 && bytes.size() == 4) std::memcpy(&v, bytes.data(), 4);
        if (!(v > 0.0f) || !std::isfinite(v))
          raise("E_CSF_GLOBALS", {file_of(options, t), r->name, leaf_of(t->name)}, "one positive finite F32",
                std::string(dtype_name(t->dtype)) + (bytes.size() == 4 ? fmt::format(" {}", v) : " value"));
        if (t == r->global_scale) globals[p] = std::move(bytes);
      }
    }
    if (globals.count("gate_proj") && globals.count("up_proj") &&
        globals["gate_proj"] != globals["up_proj"]) {
      float g = 0, u = 0;
      std::memcpy(&g, globals["gate_proj"].data(), 4);
      std::memcpy(&u, globals["up_proj"].data(), 4);
      raise("E_CSF_W13_GLOBAL_MISMATCH", at(options, *projs.at("up_proj"), "weight_scale_2"),
            fmt::format("gate_proj's weight_scale_2 {}", g), fmt::format("{}", u), "expert '" + expert + "'");
    }
  }
}

void check_expert_stacks(const std::vector<WeightRecord>& records, const ClassifyOptions& options) {
  struct Stack {
    std::map<int, std::map<std::string, const WeightRecord*>> experts;
    std::set<std::string> projections;
  };
  std::map<std::string, Stack> stacks;
  for (const auto& r : records) {
    if (r.kind != RecordKind::Weight || r.skipped) continue;
    std::string container, proj;
    int e = 0;
    if (!parse_expert_module(r.module, &container, &e, &proj)) continue;
    Stack& s = stacks[container];
    s.experts[e][proj] = &r;
    s.projections.insert(proj);
  }
  const int64_t configured =
      config_int(options.text_config, {"num_experts", "n_routed_experts", "num_local_experts"});
  for (const auto& [container, s] : stacks) {
    const WeightRecord* first = s.experts.begin()->second.begin()->second;
    const int64_t count = configured > 0 ? configured : s.experts.rbegin()->first + 1;
    for (int64_t e = 0; e < count; ++e) {
      auto it = s.experts.find(static_cast<int>(e));
      for (const auto& p : s.projections) {
        if (it == s.experts.end() || !it->second.count(p))
          raise("E_MOE_EXPERT_MISSING", {file_of(options, first->main.front()), container, ""},
                fmt::format("experts 0 … {} each with {}", count - 1, p),
                fmt::format("no '{}.{}.{}.weight'", container, e, p));
      }
    }
    if (s.experts.rbegin()->first >= count)
      raise("E_MOE_EXPERT_MISSING", {file_of(options, first->main.front()), container, ""},
            fmt::format("{} experts (config)", count),
            fmt::format("expert index {}", s.experts.rbegin()->first));
    for (const auto& [e, projs] : s.experts) {
      for (const auto& [p, r] : projs) {
        if (r->format != first->format || r->scale_encoding != first->scale_encoding ||
            r->block_n != first->block_n || r->block_k != first->block_k)
          raise("E_MOE_MIXED_FORMATS", at(options, *r),
                fmt::format("{} like '{}'", format_name(first->format), first->name),
                std::string(format_name(r->format)) +
                    (r->scale_encoding != first->scale_encoding ? " with a different scale encoding" : ""));
      }
    }
  }
}

void check_ple_rows(const std::vector<WeightRecord>& records, const std::vector<TensorEntry>& tensors,
                    const ClassifyOptions& options) {
  const nlohmann::json& tc = options.text_config;
  for (const auto& r : records) {
    if (r.kind != RecordKind::Weight || r.main.empty() ||
        r.main.front()->name.find(".shard_") == std::string::npos)
      continue;
    const int64_t de_total = config_int(tc, {"ple_embed_dim"});
    const int64_t ngram = config_int(tc, {"ngram_size"});
    const int64_t heads = config_int(tc, {"heads_per_ngram"});
    if (de_total > 0 && ngram > 1 && heads > 0) {
      const int64_t de = de_total / ((ngram - 1) * heads);
      if (static_cast<int64_t>(r.shape[1]) != de)
        raise("E_PLE_SHARD_SHAPE", at(options, r), fmt::format("width {} (ple_embed_dim / G)", de),
              fmt::format("width {}", r.shape[1]));
    }
    if (!options.read) continue;
    std::string prefix = r.module.substr(0, r.module.rfind('.'));
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const TensorEntry& t) {
      return t.name == prefix + ".ngram_heads_vocab_sizes";
    });
    if (it == tensors.end() || (it->dtype != DType::I64 && it->dtype != DType::I32)) continue;
    std::vector<uint8_t> bytes = options.read(*it);
    uint64_t sum = 0;
    const size_t w = it->dtype == DType::I64 ? 8 : 4;
    for (size_t i = 0; i + w <= bytes.size(); i += w) {
      int64_t v = 0;
      if (w == 8)
        std::memcpy(&v, bytes.data() + i, 8);
      else {
        int32_t v32 = 0;
        std::memcpy(&v32, bytes.data() + i, 4);
        v = v32;
      }
      if (v < 0 || v > (int64_t{1} << 40))
        raise("E_PLE_BUFFER_MISMATCH", {file_of(options, &*it), it->name, ""},
              "positive head vocabulary sizes", std::to_string(v));
      sum += static_cast<uint64_t>(v);
    }
    int64_t m = config_int(tc, {"make_ngram_vocab_size_divisible_by"});
    if (m <= 0) m = 128;
    const uint64_t vp = (sum + m - 1) / m * m;
    if (r.shape[0] != vp)
      raise("E_PLE_ROWS", at(options, r),
            fmt::format("{} rows (ceil(Σ ngram_heads_vocab_sizes / {}) · {})", vp, m, m),
            fmt::format("{} rows in {} shards", r.shape[0], r.main.size()));
    const int64_t parts = config_int(tc, {"split_ngram_parts"});
    if (parts > 0) {
      const uint64_t c = (vp + parts - 1) / parts;
      const uint64_t shards = (vp + c - 1) / c;
      if (r.main.front()->shape[0] != c)
        raise("E_PLE_SHARD_SHAPE", at(options, r, "shard_0"), fmt::format("{} rows per shard", c),
              fmt::format("{} rows", r.main.front()->shape[0]));
      if (r.main.size() != shards)
        raise("E_PLE_SHARD_MISSING", at(options, r), fmt::format("{} shards", shards),
              fmt::format("{} shards", r.main.size()));
    }
  }
}

void check_plan_keys_used(const std::vector<WeightRecord>& records, const QuantPlan& plan,
                          Warnings& warnings) {
  for (const auto& rule : plan.rules) {
    for (const auto& target : rule.targets) {
      if (target.kind != PatternKind::Prefix && target.kind != PatternKind::Exact) continue;
      // A key may be written with the other language-model prefix (§4.4); try both spellings.
      std::vector<ModulePattern> spellings{target};
      const std::string lm = "model.language_model.";
      spellings.push_back(target);
      if (starts_with(target.text, lm))
        spellings.back().text = "model." + target.text.substr(lm.size());
      else if (starts_with(target.text, "model."))
        spellings.back().text = lm + target.text.substr(6);
      bool used = false;
      for (const auto& r : records) {
        for (const auto& p : spellings) used = used || p.matches(r.module, true);
        if (used) break;
      }
      if (!used)
        warnings.add("W_Q_PLAN_KEY_UNMATCHED", {plan.file, target.text, rule.key},
                     "no stored tensor belongs to this module; the key is ignored");
    }
  }
}

}  // namespace bloomery
