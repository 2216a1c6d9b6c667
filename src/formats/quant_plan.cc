// Resolving the quantisation plan from hf_quant_config.json / config.json (formats.md §4.1–§4.7).
#include "formats/quant_plan.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace bloomery {

namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

QuantScheme make_scheme(FormatId f, std::string algo, int group = 0, int bn = 0, int bk = 0) {
  QuantScheme s;
  s.quantized = true;
  s.format = f;
  s.algo = std::move(algo);
  s.group_size = group;
  s.block_n = bn;
  s.block_k = bk;
  return s;
}

// An integer field, or `fallback` when absent/null; a non-integer value is a config error.
int int_field(const nlohmann::json& obj, const char* key, int fallback, std::string_view file) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  const auto& v = obj[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (1 << 20))
    raise("E_CFG_QUANT_ALGO_UNKNOWN", {std::string(file), "", key}, "a positive integer", v.dump());
  return v.get<int>();
}

std::string string_field(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_string()) return {};
  return obj[key].get<std::string>();
}

// ModelOpt algorithm name → scheme (§4.3 rule 2). group_size from the same object, or the format's default.
QuantScheme modelopt_scheme(const nlohmann::json& algo_json, const nlohmann::json& obj, std::string_view file,
                            std::string_view field) {
  if (algo_json.is_null()) return QuantScheme::dense();
  if (!algo_json.is_string())
    raise("E_CFG_QUANT_ALGO_UNKNOWN", {std::string(file), "", std::string(field)}, "a quant_algo string",
          algo_json.dump());
  std::string algo = upper(algo_json.get<std::string>());
  Where where{std::string(file), "", std::string(field)};
  auto group = [&](int def) { return int_field(obj, "group_size", def, file); };
  auto require_group = [&](int g, int want) {
    if (g != want)
      raise("E_CFG_ALGO_UNSUPPORTED", where, fmt::format("{} with group_size {}", algo, want),
            fmt::format("group_size {}", g));
  };
  if (algo == "NVFP4" || algo == "W4A16_NVFP4") {
    int g = group(16);
    require_group(g, 16);
    return make_scheme(algo == "NVFP4" ? FormatId::NVFP4 : FormatId::W4A16_NVFP4, algo, g);
  }
  if (algo == "MXFP4" || algo == "MXFP8") {
    int g = group(32);
    require_group(g, 32);
    return make_scheme(algo == "MXFP4" ? FormatId::MXFP4 : FormatId::MXFP8, algo, g);
  }
  if (algo == "FP8") return make_scheme(FormatId::FP8_TENSOR, algo);
  if (algo == "FP8_PER_CHANNEL_PER_TOKEN") return make_scheme(FormatId::FP8_CHANNEL, algo);
  if (algo == "FP8_PB_WO" || algo == "FP8_BLOCK_SCALES") {
    int g = group(128);
    auto s = make_scheme(FormatId::FP8_BLOCK, algo, 0, g, g);
    return s;
  }
  static const std::set<std::string, std::less<>> unsupported = {
      "NVFP4_AWQ", "NVFP4_SVD", "W4A8_NVFP4_FP8", "W4A8_MXFP4_FP8",
      "W4A16_AWQ", "W4A8_AWQ",  "W8A16",          "W8A8_SQ_PER_CHANNEL"};
  if (unsupported.count(algo))
    raise("E_CFG_ALGO_UNSUPPORTED", where,
          "NVFP4, W4A16_NVFP4, MXFP4, MXFP8, FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, FP8_BLOCK_SCALES",
          algo);
  raise("E_CFG_QUANT_ALGO_UNKNOWN", where, "a ModelOpt quant_algo", algo);
}

std::string kv_scheme_from(const nlohmann::json& qc) {
  if (qc.contains("kv_cache_quant_algo") && qc["kv_cache_quant_algo"].is_string())
    return upper(qc["kv_cache_quant_algo"].get<std::string>());
  if (!qc.contains("kv_cache_scheme")) return {};
  const auto& k = qc["kv_cache_scheme"];
  if (k.is_string()) return upper(k.get<std::string>());
  if (k.is_object()) {
    int bits = k.contains("num_bits") && k["num_bits"].is_number_integer() ? k["num_bits"].get<int>() : 0;
    std::string type = string_field(k, "type");
    if (bits == 8 && type == "float") return "FP8";
    if (bits == 8 && type == "int") return "INT8";
    return k.dump();
  }
  return {};
}

void read_producer(const nlohmann::json& qc, QuantPlan& plan) {
  if (qc.contains("producer") && qc["producer"].is_object()) {
    plan.producer_name = string_field(qc["producer"], "name");
    plan.producer_version = string_field(qc["producer"], "version");
  }
}

// A list of pattern strings (exclude_modules / ignore / targets); anything else is a config error.
std::vector<std::string> string_list(const nlohmann::json& obj, const char* key, std::string_view file) {
  std::vector<std::string> out;
  if (!obj.contains(key) || obj[key].is_null()) return out;
  const auto& v = obj[key];
  if (!v.is_array())
    raise("E_CFG_QUANT_ALGO_UNKNOWN", {std::string(file), "", key}, "a list of module names", v.dump());
  for (const auto& e : v) {
    if (!e.is_string())
      raise("E_CFG_QUANT_ALGO_UNKNOWN", {std::string(file), "", key}, "module-name strings", e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// compressed-tensors target / ignore entry: "re:<regex>", a class name, or an exact module name.
ModulePattern ct_pattern(const std::string& s, std::string_view file, std::string_view field) {
  if (starts_with(s, "re:")) return ModulePattern::make(PatternKind::Regex, s.substr(3), file, field);
  bool class_name =
      !s.empty() && std::isupper(static_cast<unsigned char>(s[0])) && s.find('.') == std::string::npos;
  return ModulePattern::make(class_name ? PatternKind::ClassName : PatternKind::Exact, s, file, field);
}

// Alternative spellings of a module name tried when nothing matched as written (§4.4 name normalisation).
std::vector<std::string> alternative_names(std::string_view m) {
  std::vector<std::string> alts;
  const std::string_view lm = "model.language_model.";
  if (starts_with(m, lm))
    alts.push_back("model." + std::string(m.substr(lm.size())));
  else if (starts_with(m, "model."))
    alts.push_back(std::string(lm) + std::string(m.substr(6)));
  if (starts_with(m, "language_model.")) alts.push_back(std::string(m.substr(15)));
  return alts;
}

// Fused module names of vLLM expanded to the checkpoint's shards (§4.4).
std::vector<std::string> expand_fused_key(const std::string& key) {
  std::vector<std::string> out{key};
  auto expand = [&](std::string_view fused, std::initializer_list<const char*> parts) {
    if (!ends_with(key, fused)) return;
    std::string base = key.substr(0, key.size() - fused.size());
    for (const char* p : parts) out.push_back(base + p);
  };
  expand(".qkv_proj", {".q_proj", ".k_proj", ".v_proj"});
  expand(".gate_up_proj", {".gate_proj", ".up_proj"});
  return out;
}

}  // namespace

bool QuantScheme::same_format(const QuantScheme& o) const {
  if (quantized != o.quantized) return false;
  if (!quantized) return true;
  return format == o.format && group_size == o.group_size && block_n == o.block_n && block_k == o.block_k &&
         e8m0_scales == o.e8m0_scales;
}

std::string QuantScheme::describe() const {
  if (!quantized) return "dense";
  std::string s(format_name(format));
  if (!algo.empty() && algo != s) s += " (" + algo + ")";
  if (block_n) s += fmt::format(" {}x{}", block_n, block_k);
  return s;
}

std::string_view plan_source_name(PlanSource s) {
  switch (s) {
    case PlanSource::None:
      return "none";
    case PlanSource::HfQuantConfig:
      return "hf_quant_config.json";
    case PlanSource::ConfigModelOpt:
      return "config.json (modelopt)";
    case PlanSource::CompressedTensors:
      return "config.json (compressed-tensors)";
    case PlanSource::BlockFp8:
      return "config.json (fp8)";
    case PlanSource::Mxfp4Moe:
      return "config.json (mxfp4)";
    case PlanSource::Csf:
      return "csf (source_quantization_config)";
  }
  return "?";
}

bool glob_match(std::string_view p, std::string_view t) {
  // Iterative matcher with one backtrack point for the last '*' (linear in practice, no recursion).
  size_t pi = 0, ti = 0, star_p = std::string_view::npos, star_t = 0;
  auto match_one = [&](size_t& pj, char c) -> bool {  // matches p[pj] (a char, '?', or a set) against c
    if (p[pj] == '?') {
      ++pj;
      return true;
    }
    if (p[pj] == '[') {
      size_t j = pj + 1;
      bool negate = j < p.size() && (p[j] == '!' || p[j] == '^');
      if (negate) ++j;
      bool hit = false;
      size_t start = j;
      while (j < p.size() && (p[j] != ']' || j == start)) {
        if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
          if (p[j] <= c && c <= p[j + 2]) hit = true;
          j += 3;
        } else {
          if (p[j] == c) hit = true;
          ++j;
        }
      }
      if (j >= p.size()) {  // no closing bracket: '[' is a literal, as fnmatch does
        bool ok = c == '[';
        ++pj;
        return ok;
      }
      pj = j + 1;
      return hit != negate;
    }
    return p[pj++] == c;
  };
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = pi++;
      star_t = ti;
      continue;
    }
    size_t pj = pi;
    if (pi < p.size() && match_one(pj, t[ti])) {
      pi = pj;
      ++ti;
      continue;
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p + 1;
    ti = ++star_t;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

ModulePattern ModulePattern::make(PatternKind kind, std::string text, std::string_view file,
                                  std::string_view field) {
  ModulePattern p;
  p.kind = kind;
  p.text = std::move(text);
  if (kind == PatternKind::Regex) {
    try {
      p.regex = std::make_shared<const ModuleRegex>(ModuleRegex::compile(p.text));
    } catch (const ModuleRegexError& e) {
      raise("E_CFG_PATTERN_INVALID", {std::string(file), "", std::string(field)}, "a valid re: pattern",
            "'" + p.text + "'", e.what());
    }
  }
  return p;
}

bool ModulePattern::matches(std::string_view module, bool is_linear) const {
  switch (kind) {
    case PatternKind::Exact:
      return module == text;
    case PatternKind::Prefix:
      return module == text ||
             (module.size() > text.size() && starts_with(module, text) && module[text.size()] == '.');
    case PatternKind::Substring:
      return module.find(text) != std::string_view::npos;
    case PatternKind::ClassName:
      return text == "Linear" && is_linear;
    case PatternKind::Glob: {
      if (glob_match(text, module)) return true;
      if (!ends_with(text, "*")) return false;
      // vLLM is_layer_excluded: "prefix*" / "prefix.*" also cover the bare module "prefix".
      std::string_view base = std::string_view(text).substr(0, text.size() - 1);
      if (ends_with(base, ".")) base.remove_suffix(1);
      return glob_match(base, module) || glob_match(std::string(base) + ".*", module);
    }
    case PatternKind::Regex: {
      return regex && regex->match_prefix(module);
    }
  }
  return false;
}

Prediction QuantPlan::predict(std::string_view module, bool is_linear, Warnings& warnings) const {
  auto excluded_by = [&](std::string_view m) -> const ModulePattern* {
    for (const auto& p : exclusions)
      if (p.matches(m, is_linear)) return &p;
    return nullptr;
  };
  // Rules against the name as written, then its normalised spellings.
  std::vector<std::string> names{std::string(module)};
  for (auto& a : alternative_names(module)) names.push_back(std::move(a));
  for (size_t ni = 0; ni < names.size(); ++ni) {
    const std::string& m = names[ni];
    const PlanRule* best = nullptr;
    if (longest_match) {
      for (const auto& r : rules) {
        if (!r.targets.front().matches(m, is_linear)) continue;
        if (!best || r.key.size() > best->key.size()) {
          best = &r;
        } else if (r.key.size() == best->key.size() && !r.scheme.same_format(best->scheme)) {
          raise("E_CFG_MIXED_AMBIGUOUS", {file, std::string(module), "quantized_layers"},
                "one longest matching key",
                "'" + best->key + "' (" + best->scheme.describe() + ") and '" + r.key + "' (" +
                    r.scheme.describe() + ")");
        }
      }
    } else {
      for (const auto& r : rules) {
        bool hit = std::any_of(r.targets.begin(), r.targets.end(),
                               [&](const ModulePattern& p) { return p.matches(m, is_linear); });
        if (hit && !excluded_by(m)) {
          best = &r;
          break;
        }
      }
    }
    if (!best) continue;
    if (ni > 0)
      warnings.add("W_CFG_NAME_NORMALISED", {file, std::string(module), ""},
                   "matched the plan as '" + m + "'");
    if (longest_match) {
      if (const ModulePattern* ex = excluded_by(m))
        raise("E_CFG_MIXED_CONFLICT", {file, std::string(module), "quantized_layers"},
              "a module either quantised or excluded",
              "quantized_layers key '" + best->key + "' and exclusion '" + ex->text + "'");
    }
    return {best->scheme, (longest_match ? "quantized_layers key '" : "group '") + best->key + "'"};
  }
  for (const auto& m : names) {
    if (const ModulePattern* ex = excluded_by(m))
      return {QuantScheme::dense(), "excluded by '" + ex->text + "'"};
  }
  if (!is_linear || !default_scheme.quantized) return {QuantScheme::dense(), "not a target"};
  return {default_scheme, "default"};
}

const nlohmann::json* find_quantization_config(const nlohmann::json& config, Warnings& warnings,
                                               std::string_view file) {
  if (!config.is_object()) return nullptr;
  const nlohmann::json* top = nullptr;
  const nlohmann::json* text = nullptr;
  if (config.contains("quantization_config") && !config["quantization_config"].is_null())
    top = &config["quantization_config"];
  if (config.contains("text_config") && config["text_config"].is_object()) {
    const auto& tc = config["text_config"];
    if (tc.contains("quantization_config") && !tc["quantization_config"].is_null())
      text = &tc["quantization_config"];
  }
  if (top && text && *top != *text)
    warnings.add("W_CFG_QC_MIRROR_DIFFERS", {std::string(file), "", "text_config.quantization_config"},
                 "differs from the top-level quantization_config; the top level wins");
  const nlohmann::json* qc = top ? top : text;
  if (qc && !qc->is_object())
    raise("E_CFG_QUANT_METHOD_UNKNOWN", {std::string(file), "", "quantization_config"}, "an object",
          qc->dump());
  return qc;
}

QuantPlan resolve_modelopt(const nlohmann::json& qc, std::string_view file, bool legacy_file,
                           Warnings& warnings) {
  QuantPlan plan;
  plan.file = std::string(file);
  if (!qc.is_object())
    raise("E_CFG_QUANT_ALGO_UNKNOWN", {plan.file, "", "quantization"}, "an object", qc.dump());
  plan.quant_method = string_field(qc, "quant_method");
  read_producer(qc, plan);
  plan.kv_cache_scheme = kv_scheme_from(qc);
  const nlohmann::json algo_json = qc.contains("quant_algo") ? qc["quant_algo"] : nlohmann::json();
  plan.quant_algo = algo_json.is_string() ? upper(algo_json.get<std::string>()) : "";

  // exclude_modules (hf_quant_config) and ignore (config.json) carry the same content; take their union.
  std::vector<std::string> excl = string_list(qc, "exclude_modules", file);
  for (auto& s : string_list(qc, "ignore", file))
    if (std::find(excl.begin(), excl.end(), s) == excl.end()) excl.push_back(std::move(s));
  for (auto& s : excl) plan.exclusions.push_back(ModulePattern::make(PatternKind::Glob, std::move(s)));

  if (plan.quant_algo == "MIXED_PRECISION") {
    plan.longest_match = true;
    if (!qc.contains("quantized_layers") || !qc["quantized_layers"].is_object())
      raise("E_CFG_MIXED_NO_LAYERS", {plan.file, "", "quantized_layers"}, "an object of module → config",
            qc.contains("quantized_layers") ? qc["quantized_layers"].dump() : "no quantized_layers");
    for (const auto& [key, cfg] : qc["quantized_layers"].items()) {
      std::string field = "quantized_layers." + key;
      if (!cfg.is_object())
        raise("E_CFG_QUANT_ALGO_UNKNOWN", {plan.file, "", field}, "an object with quant_algo", cfg.dump());
      const nlohmann::json a = cfg.contains("quant_algo") ? cfg["quant_algo"] : nlohmann::json();
      if (a.is_string() && upper(a.get<std::string>()) == "MIXED_PRECISION")
        raise("E_CFG_QUANT_ALGO_UNKNOWN", {plan.file, "", field}, "a single-format quant_algo",
              "MIXED_PRECISION");
      QuantScheme scheme = modelopt_scheme(a, cfg, file, field + ".quant_algo");
      for (const std::string& k : expand_fused_key(key)) {
        for (const auto& r : plan.rules)
          if (r.key == k && !r.scheme.same_format(scheme))
            raise("E_CFG_MIXED_AMBIGUOUS", {plan.file, k, "quantized_layers"}, "one scheme per module",
                  r.scheme.describe() + " and " + scheme.describe());
        plan.rules.push_back({k, {ModulePattern::make(PatternKind::Prefix, k)}, scheme});
        for (const auto& ex : plan.exclusions)
          if (ex.matches(k, true))
            raise("E_CFG_MIXED_CONFLICT", {plan.file, k, "quantized_layers"},
                  "a module either quantised or excluded",
                  "quantized_layers key '" + k + "' and exclusion '" + ex.text + "'");
      }
    }
    return plan;
  }

  plan.default_scheme = modelopt_scheme(algo_json, qc, file, "quant_algo");
  if (legacy_file && plan.default_scheme.quantized) {
    for (const char* key : {"group_size", "kv_cache_quant_algo", "exclude_modules"}) {
      if (key == std::string_view("group_size") && plan.default_scheme.group_size == 0) continue;
      if (!qc.contains(key))
        warnings.add("W_CFG_MISSING_KEY", {plan.file, "", key}, "absent; its default is used");
    }
  }
  return plan;
}

QuantPlan resolve_compressed_tensors(const nlohmann::json& qc, std::string_view file, Warnings& warnings) {
  QuantPlan plan;
  plan.file = std::string(file);
  plan.source = PlanSource::CompressedTensors;
  plan.quant_method = "compressed-tensors";
  plan.kv_cache_scheme = kv_scheme_from(qc);
  plan.producer_name = "compressed-tensors";
  for (const auto& s : string_list(qc, "ignore", file))
    plan.exclusions.push_back(ct_pattern(s, file, "ignore"));
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object()) {
    warnings.add("W_CFG_MISSING_KEY", {plan.file, "", "config_groups"},
                 "absent; every module is predicted dense");
    return plan;
  }
  std::string top_format = string_field(qc, "format");
  for (const auto& [name, g] : qc["config_groups"].items()) {
    std::string field = "config_groups." + name;
    if (!g.is_object()) raise("E_CFG_QUANT_ALGO_UNKNOWN", {plan.file, "", field}, "an object", g.dump());
    PlanRule rule;
    rule.key = name;
    for (const auto& t : string_list(g, "targets", file)) rule.targets.push_back(ct_pattern(t, file, field));
    const nlohmann::json w = g.contains("weights") ? g["weights"] : nlohmann::json();
    if (w.is_object()) {
      std::string type = string_field(w, "type");
      int bits = int_field(w, "num_bits", 0, file);
      std::string strategy = string_field(w, "strategy");
      int group =
          w.contains("group_size") && w["group_size"].is_number_integer() ? w["group_size"].get<int>() : 0;
      std::string fmt_name = string_field(g, "format");
      if (fmt_name.empty()) fmt_name = top_format;
      std::string algo = fmt::format("ct:{}{}/{}", type, bits, strategy);
      Where where{plan.file, "", field + ".weights"};
      if (type == "int")
        raise("E_CFG_ALGO_UNSUPPORTED", where, "a float weight scheme",
              fmt::format("int{} ({})", bits, strategy));
      if (type != "float") raise("E_CFG_QUANT_ALGO_UNKNOWN", where, "type float", "type '" + type + "'");
      if (bits == 4 && group == 16) {
        rule.scheme = make_scheme(FormatId::NVFP4_CT, algo, 16);
      } else if (bits == 4 && group == 32) {
        rule.scheme = make_scheme(FormatId::MXFP4, algo, 32);
      } else if (bits == 8 && group == 32 &&
                 (strategy == "group" || strategy == "tensor_group" || strategy.empty() ||
                  fmt_name == "mxfp8-quantized")) {
        rule.scheme = make_scheme(FormatId::MXFP8, algo, 32);
      } else if (bits == 8 && strategy == "tensor") {
        rule.scheme = make_scheme(FormatId::FP8_TENSOR, algo);
      } else if (bits == 8 && strategy == "channel") {
        rule.scheme = make_scheme(FormatId::FP8_CHANNEL, algo);
      } else if (bits == 8 && strategy == "block") {
        int bn = 128, bk = 128;
        if (w.contains("block_structure") && !w["block_structure"].is_null()) {
          const auto& b = w["block_structure"];
          if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
              b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > 65536 ||
              b[1].get<int64_t>() > 65536)
            raise("E_CFG_QUANT_ALGO_UNKNOWN", {plan.file, "", field + ".weights.block_structure"},
                  "[block_n, block_k]", b.dump());
          bn = b[0].get<int>();
          bk = b[1].get<int>();
        }
        rule.scheme = make_scheme(FormatId::FP8_BLOCK, algo, 0, bn, bk);
      } else {
        raise("E_CFG_ALGO_UNSUPPORTED", where, "float4 group 16/32, or float8 tensor/channel/block/group 32",
              fmt::format("float{} strategy '{}' group_size {}", bits, strategy, group));
      }
    }
    plan.rules.push_back(std::move(rule));
  }
  return plan;
}

QuantPlan resolve_block_fp8(const nlohmann::json& qc, std::string_view file, Warnings& warnings) {
  QuantPlan plan;
  plan.file = std::string(file);
  plan.source = PlanSource::BlockFp8;
  plan.quant_method = "fp8";
  std::string fmt_name = string_field(qc, "fmt");
  if (!fmt_name.empty() && fmt_name != "e4m3")
    raise("E_CFG_ALGO_UNSUPPORTED", {plan.file, "", "fmt"}, "e4m3", fmt_name);
  int bn = 128, bk = 128;
  if (qc.contains("weight_block_size") && !qc["weight_block_size"].is_null()) {
    const auto& b = qc["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > 65536 ||
        b[1].get<int64_t>() > 65536)
      raise("E_CFG_QUANT_ALGO_UNKNOWN", {plan.file, "", "weight_block_size"}, "[block_n, block_k]", b.dump());
    bn = b[0].get<int>();
    bk = b[1].get<int>();
  } else {
    // transformers' finegrained FP8 without a block size is per-tensor FP8; we only predict, tensors decide.
    warnings.add("W_CFG_MISSING_KEY", {plan.file, "", "weight_block_size"}, "absent; [128, 128] assumed");
  }
  plan.default_scheme = make_scheme(FormatId::FP8_BLOCK, "FP8", 0, bn, bk);
  plan.default_scheme.e8m0_scales = string_field(qc, "scale_fmt") == "ue8m0";
  for (auto& s : string_list(qc, "modules_to_not_convert", file))
    plan.exclusions.push_back(ModulePattern::make(PatternKind::Substring, std::move(s)));
  return plan;
}

QuantPlan resolve_mxfp4_moe(const nlohmann::json& qc, std::string_view file, Warnings& warnings) {
  QuantPlan plan;
  plan.file = std::string(file);
  plan.source = PlanSource::Mxfp4Moe;
  plan.quant_method = "mxfp4";
  plan.default_scheme = make_scheme(FormatId::MXFP4, "MXFP4", 32);
  for (auto& s : string_list(qc, "modules_to_not_convert", file))
    plan.exclusions.push_back(ModulePattern::make(PatternKind::Substring, std::move(s)));
  return plan;
}

namespace {

// config.json quantization_config by quant_method (§4.2's switch).
QuantPlan resolve_config_qc(const nlohmann::json& qc, std::string_view file, Warnings& warnings) {
  if (!qc.contains("quant_method") || qc["quant_method"].is_null()) {
    if (qc.contains("quant_algo")) {
      warnings.add("W_CFG_NO_QUANT_METHOD", {std::string(file), "", "quantization_config"},
                   "quant_algo without quant_method; read as ModelOpt");
      QuantPlan p = resolve_modelopt(qc, file, false, warnings);
      p.source = PlanSource::ConfigModelOpt;
      return p;
    }
    raise("E_CFG_QUANT_METHOD_UNKNOWN", {std::string(file), "", "quantization_config.quant_method"},
          "modelopt, compressed-tensors, fp8, mxfp4 or nvfp4_csf", "no quant_method and no quant_algo");
  }
  if (!qc["quant_method"].is_string())
    raise("E_CFG_QUANT_METHOD_UNKNOWN", {std::string(file), "", "quantization_config.quant_method"},
          "a string", qc["quant_method"].dump());
  std::string method = qc["quant_method"].get<std::string>();
  if (starts_with(method, "modelopt")) {
    QuantPlan p = resolve_modelopt(qc, file, false, warnings);
    p.source = PlanSource::ConfigModelOpt;
    return p;
  }
  if (method == "compressed-tensors") return resolve_compressed_tensors(qc, file, warnings);
  if (method == "fp8") return resolve_block_fp8(qc, file, warnings);
  if (method == "mxfp4") return resolve_mxfp4_moe(qc, file, warnings);
  raise("E_CFG_QUANT_METHOD_UNKNOWN", {std::string(file), "", "quantization_config.quant_method"},
        "modelopt, compressed-tensors, fp8, mxfp4 or nvfp4_csf", "'" + method + "'");
}

// W_CFG_SOURCES_DISAGREE for each difference between the hf_quant_config plan and config.json's block.
void cross_check(const QuantPlan& primary, const QuantPlan& other, Warnings& warnings) {
  Where where{"config.json", "", "quantization_config"};
  if (primary.quant_algo != other.quant_algo)
    warnings.add(
        "W_CFG_SOURCES_DISAGREE", where,
        "quant_algo '" + primary.quant_algo + "' in hf_quant_config.json, '" + other.quant_algo + "' here");
  if (!primary.default_scheme.same_format(other.default_scheme))
    warnings.add(
        "W_CFG_SOURCES_DISAGREE", where,
        "default scheme " + primary.default_scheme.describe() + " vs " + other.default_scheme.describe());
  std::set<std::string> a, b;
  for (const auto& p : primary.exclusions) a.insert(p.text);
  for (const auto& p : other.exclusions) b.insert(p.text);
  for (const auto& s : a)
    if (!b.count(s))
      warnings.add("W_CFG_SOURCES_DISAGREE", {where.file, s, "ignore"},
                   "excluded only in hf_quant_config.json");
  for (const auto& s : b)
    if (!a.count(s))
      warnings.add("W_CFG_SOURCES_DISAGREE", {where.file, s, "ignore"}, "excluded only in config.json");
  for (const auto& r : primary.rules) {
    auto it = std::find_if(other.rules.begin(), other.rules.end(),
                           [&](const PlanRule& o) { return o.key == r.key; });
    if (it == other.rules.end())
      warnings.add("W_CFG_SOURCES_DISAGREE", {where.file, r.key, "quantized_layers"},
                   "only in hf_quant_config.json");
    else if (!it->scheme.same_format(r.scheme))
      warnings.add("W_CFG_SOURCES_DISAGREE", {where.file, r.key, "quantized_layers"},
                   r.scheme.describe() + " vs " + it->scheme.describe());
  }
  for (const auto& r : other.rules) {
    bool found = std::any_of(primary.rules.begin(), primary.rules.end(),
                             [&](const PlanRule& o) { return o.key == r.key; });
    if (!found)
      warnings.add("W_CFG_SOURCES_DISAGREE", {where.file, r.key, "quantized_layers"}, "only in config.json");
  }
}

}  // namespace

QuantPlan resolve_quant_plan(const nlohmann::json& config, const nlohmann::json& hf_quant_config, bool csf,
                             Warnings& warnings) {
  const nlohmann::json* qc = find_quantization_config(config, warnings);
  bool csf_qc = qc && qc->contains("quant_method") && (*qc)["quant_method"] == "nvfp4_csf";
  if (csf || csf_qc) {
    QuantPlan plan;
    if (csf_qc && qc->contains("source_quantization_config")) {
      if (!(*qc)["source_quantization_config"].is_object())
        raise("E_CSF_SCHEMA", {"config.json", "", "quantization_config.source_quantization_config"},
              "the original ModelOpt block (an object)", (*qc)["source_quantization_config"].dump());
      plan = resolve_modelopt((*qc)["source_quantization_config"], "config.json", false, warnings);
    } else if (hf_quant_config.is_object() && hf_quant_config.contains("quantization")) {
      plan = resolve_modelopt(hf_quant_config["quantization"], "hf_quant_config.json", true, warnings);
      if (hf_quant_config.contains("producer") && plan.producer_name.empty())
        read_producer(hf_quant_config, plan);
    } else if (qc && !csf_qc) {
      plan = resolve_config_qc(*qc, "config.json", warnings);
    } else {
      raise("E_CSF_SCHEMA", {"config.json", "", "quantization_config.source_quantization_config"},
            "the original ModelOpt block", "none",
            "neither the serving config nor hf_quant_config.json has it");
    }
    plan.source = PlanSource::Csf;
    plan.quant_method = "nvfp4_csf";
    plan.expert_scale_encoding = ScaleEncoding::NvFp4Csf;
    return plan;
  }
  if (!hf_quant_config.is_null()) {
    if (!hf_quant_config.is_object() || !hf_quant_config.contains("quantization"))
      raise("E_CFG_QUANT_ALGO_UNKNOWN", {"hf_quant_config.json", "", "quantization"}, "an object",
            hf_quant_config.is_object() ? "no 'quantization' key" : hf_quant_config.dump());
    QuantPlan plan =
        resolve_modelopt(hf_quant_config["quantization"], "hf_quant_config.json", true, warnings);
    plan.source = PlanSource::HfQuantConfig;
    read_producer(hf_quant_config, plan);
    if (qc) {
      // The config.json block only cross-checks; an unreadable one is reported, never fatal here.
      try {
        Warnings scratch;
        QuantPlan other = resolve_config_qc(*qc, "config.json", scratch);
        cross_check(plan, other, warnings);
      } catch (const Error& e) {
        warnings.add("W_CFG_SOURCES_DISAGREE", {"config.json", "", "quantization_config"},
                     std::string("unreadable next to hf_quant_config.json: ") + e.what());
      }
    }
    return plan;
  }
  if (qc) return resolve_config_qc(*qc, "config.json", warnings);
  return QuantPlan{};
}

}  // namespace bloomery
