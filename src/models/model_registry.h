// model_type → family factory, and the reading of config.json into a ModelConfig (text_config wrapper,
// `model.language_model.` prefix). The family table lives in model_registry.cc: one line per family.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"

namespace bloomery {

using ModelFactory = std::unique_ptr<Model> (*)(const ModelConfig&);

// Every family a folder may name. Factories are defined in the family's own file.
std::unique_ptr<Model> make_qwen3_next(const ModelConfig&);
std::unique_ptr<Model> make_qwen4_exp(const ModelConfig&);
std::unique_ptr<Model> make_glm5_next(const ModelConfig&);

// Unwraps `text_config` and picks the prefix: "model.language_model." when any tensor name starts with it,
// else "model.". Throws E_MODEL_TYPE_MISSING when config.json has no model_type.
ModelConfig read_model_config(const nlohmann::json& config, const std::vector<std::string>& tensor_names);

// The family's model; E_MODEL_TYPE_UNKNOWN (listing the known types) when none matches.
std::unique_ptr<Model> create_model(const ModelConfig& config);

// Known model_type strings (outer and text types).
std::vector<std::string> known_model_types();

// Config helpers for families: a required field (E_CFG_FIELD_MISSING / E_CFG_FIELD_TYPE naming config.json
// and the key) and an optional one with a default.
int64_t cfg_int(const nlohmann::json& c, std::string_view key);
int64_t cfg_int(const nlohmann::json& c, std::string_view key, int64_t dflt);
double cfg_num(const nlohmann::json& c, std::string_view key, double dflt);
bool cfg_bool(const nlohmann::json& c, std::string_view key, bool dflt);
std::string cfg_str(const nlohmann::json& c, std::string_view key, std::string dflt);
// eos_token_id as a list (int or list in the config; empty when absent).
std::vector<int32_t> cfg_eos_ids(const nlohmann::json& c);

}  // namespace bloomery
