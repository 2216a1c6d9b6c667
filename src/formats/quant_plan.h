// The normalised quantisation plan of a checkpoint folder (formats.md §4.1–§4.7): which scheme each module is
// predicted to use. The plan is a prediction; the stored tensors decide (classify.h, §4.8).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/format_table.h"
#include "formats/module_regex.h"

namespace bloomery {

// A predicted storage scheme: dense, or one quantised format with its block parameters.
struct QuantScheme {
  bool quantized = false;
  FormatId format = FormatId::BF16;  // meaningful only when quantized
  std::string algo;    // the config's name for it ("NVFP4", "FP8_BLOCK_SCALES", "ct:float4/16", ...)
  int group_size = 0;  // K elements per scale (NVFP4 16, MX 32); 0 when not a group format
  int block_n = 0, block_k = 0;  // FP8 block tile; 0 = infer from the stored grid
  bool e8m0_scales = false;      // block FP8 with scale_fmt "ue8m0"

  static QuantScheme dense() { return {}; }
  // Same stored format and block parameters (algo spelling ignored).
  bool same_format(const QuantScheme& o) const;
  std::string describe() const;
};

// One module-name pattern of an exclusion list, a MIXED_PRECISION key or a compressed-tensors target.
enum class PatternKind : uint8_t {
  Glob,    // ModelOpt exclude_modules / ignore: shell glob; "prefix*" also tried as bare prefix and prefix.*
  Prefix,  // MIXED_PRECISION key: the module itself or anything below it ("key" or "key.…")
  Exact,   // compressed-tensors exact module name
  Regex,   // compressed-tensors "re:<regex>", anchored at the start only (Python re.match)
  ClassName,  // compressed-tensors class name; "Linear" = every 2-D projection weight
  Substring,  // transformers modules_to_not_convert: the text occurs in the module name
};

struct ModulePattern {
  PatternKind kind = PatternKind::Exact;
  std::string text;
  std::shared_ptr<const ModuleRegex> regex;  // compiled Regex text (Python re syntax, linear-time matching)
  // Builds a pattern; a Regex that does not compile is E_CFG_PATTERN_INVALID naming `file` and `field`.
  static ModulePattern make(PatternKind kind, std::string text, std::string_view file = {},
                            std::string_view field = {});
  // is_linear: the module's main tensor is a 2-D projection weight (for class-name targets).
  bool matches(std::string_view module, bool is_linear) const;
};

// Shell-glob match (`*` any run including dots, `?` one character, `[...]` a set, `[!...]` its complement).
bool glob_match(std::string_view pattern, std::string_view text);

struct PlanRule {
  std::string key;                     // config key or group name, for messages
  std::vector<ModulePattern> targets;  // MIXED_PRECISION: one Prefix pattern; compressed-tensors: the group's
  QuantScheme scheme;
};

enum class PlanSource : uint8_t {
  None,
  HfQuantConfig,
  ConfigModelOpt,
  CompressedTensors,
  BlockFp8,
  Mxfp4Moe,
  Csf
};
std::string_view plan_source_name(PlanSource s);

// The answer of QuantPlan::predict for one module.
struct Prediction {
  QuantScheme scheme;
  std::string why;  // "default", "quantized_layers key 'x'", "excluded by 'x'", "group 'g'", "not a target"
};

struct QuantPlan {
  PlanSource source = PlanSource::None;
  std::string file;  // where the plan was read (for messages)
  std::string
      quant_method;        // as written ("modelopt", "compressed-tensors", "fp8", "nvfp4_csf"); "" when none
  std::string quant_algo;  // normalised upper-case top-level ModelOpt algo ("NVFP4", "MIXED_PRECISION", ...)
  // Applies to linear modules that no rule matches and no exclusion covers (dense for MIXED_PRECISION and
  // compressed-tensors, where only listed modules are quantised).
  QuantScheme default_scheme;
  std::vector<PlanRule> rules;  // in config order
  bool longest_match = false;   // true: MIXED_PRECISION (longest Prefix key wins); false: first matching rule
  std::vector<ModulePattern> exclusions;
  std::string kv_cache_scheme;  // "FP8", "NVFP4", "INT8", ... ("" = none)
  std::string producer_name, producer_version;
  ScaleEncoding expert_scale_encoding = ScaleEncoding::Plain;

  // Predicts the scheme of one module (the tensor name without its final parameter component). is_linear: the
  // module's main tensor is a 2-D projection weight; only such modules get the default scheme. Throws
  // E_CFG_MIXED_AMBIGUOUS / E_CFG_MIXED_CONFLICT; W_CFG_NAME_NORMALISED when a renamed module matched.
  Prediction predict(std::string_view module, bool is_linear, Warnings& warnings) const;
};

// config.json's quantization_config (top level, else text_config); W_CFG_QC_MIRROR_DIFFERS when both exist
// and differ (the top level wins). nullptr when neither exists.
const nlohmann::json* find_quantization_config(const nlohmann::json& config, Warnings& warnings,
                                               std::string_view file = "config.json");

// One ModelOpt block: hf_quant_config.json's "quantization" object (legacy_file = true: vLLM's required keys
// get W_CFG_MISSING_KEY) or config.json's quantization_config.
QuantPlan resolve_modelopt(const nlohmann::json& qc, std::string_view file, bool legacy_file,
                           Warnings& warnings);
QuantPlan resolve_compressed_tensors(const nlohmann::json& qc, std::string_view file, Warnings& warnings);
QuantPlan resolve_block_fp8(const nlohmann::json& qc, std::string_view file, Warnings& warnings);
QuantPlan resolve_mxfp4_moe(const nlohmann::json& qc, std::string_view file, Warnings& warnings);

// The precedence of §4.2. config: config.json (null if absent); hf_quant_config: hf_quant_config.json (null
// if absent); csf: the folder is a CSF container or serving folder.
QuantPlan resolve_quant_plan(const nlohmann::json& config, const nlohmann::json& hf_quant_config, bool csf,
                             Warnings& warnings);

}  // namespace bloomery
