// The family table and config.json reading (text_config wrapper, checkpoint prefix).
#include "models/model_registry.h"

#include <algorithm>

namespace bloomery {

namespace {

struct Family {
  std::string_view model_type;  // outer model_type
  std::string_view text_type;   // the text_config's model_type ("" when the family has no wrapper)
  ModelFactory factory;         // null: known but not implemented in this build
};

// One line per family. Helper G2: set the factory of qwen4_exp / glm5_next when their model files land.
const Family kFamilies[] = {
    {"qwen3_next", "", &make_qwen3_next},
    {"qwen4_exp", "qwen4_exp_text", &make_qwen4_exp},
    {"qwen3_8_flash_next", "", &make_qwen4_exp},  // b12x's alias of qwen4_exp
    {"glm5_next", "glm5_next_text", &make_glm5_next},
};

const Family* find_family(std::string_view type) {
  for (const Family& f : kFamilies)
    if (f.model_type == type || (!f.text_type.empty() && f.text_type == type)) return &f;
  return nullptr;
}

const nlohmann::json* field(const nlohmann::json& c, std::string_view key) {
  if (!c.is_object()) return nullptr;
  auto it = c.find(std::string(key));
  if (it == c.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void field_type_error(std::string_view key, std::string_view expected, const nlohmann::json& v) {
  raise("E_CFG_FIELD_TYPE", Where{"config.json", "", std::string(key)}, std::string(expected), v.dump());
}

}  // namespace

const Weight& WeightSet::get(const std::string& name) const {
  auto it = map_.find(name);
  if (it == map_.end()) raise("E_MODEL_TENSOR_MISSING", Where{"", name, ""}, "a loaded weight", "none");
  return it->second;
}

const Weight* WeightSet::find(const std::string& name) const {
  auto it = map_.find(name);
  return it == map_.end() ? nullptr : &it->second;
}

int64_t cfg_int(const nlohmann::json& c, std::string_view key) {
  const nlohmann::json* v = field(c, key);
  if (!v) raise("E_CFG_FIELD_MISSING", Where{"config.json", "", std::string(key)}, "an integer", "absent");
  if (!v->is_number_integer()) field_type_error(key, "an integer", *v);
  return v->get<int64_t>();
}

int64_t cfg_int(const nlohmann::json& c, std::string_view key, int64_t dflt) {
  const nlohmann::json* v = field(c, key);
  if (!v) return dflt;
  if (!v->is_number_integer()) field_type_error(key, "an integer", *v);
  return v->get<int64_t>();
}

double cfg_num(const nlohmann::json& c, std::string_view key, double dflt) {
  const nlohmann::json* v = field(c, key);
  if (!v) return dflt;
  if (!v->is_number()) field_type_error(key, "a number", *v);
  return v->get<double>();
}

bool cfg_bool(const nlohmann::json& c, std::string_view key, bool dflt) {
  const nlohmann::json* v = field(c, key);
  if (!v) return dflt;
  if (!v->is_boolean()) field_type_error(key, "true or false", *v);
  return v->get<bool>();
}

std::string cfg_str(const nlohmann::json& c, std::string_view key, std::string dflt) {
  const nlohmann::json* v = field(c, key);
  if (!v) return dflt;
  if (!v->is_string()) field_type_error(key, "a string", *v);
  return v->get<std::string>();
}

std::vector<int32_t> cfg_eos_ids(const nlohmann::json& c) {
  std::vector<int32_t> ids;
  const nlohmann::json* v = field(c, "eos_token_id");
  if (!v) return ids;
  if (v->is_number_integer()) {
    ids.push_back(v->get<int32_t>());
  } else if (v->is_array()) {
    for (const auto& e : *v) {
      if (!e.is_number_integer()) field_type_error("eos_token_id", "an integer or a list of integers", *v);
      ids.push_back(e.get<int32_t>());
    }
  } else {
    field_type_error("eos_token_id", "an integer or a list of integers", *v);
  }
  return ids;
}

ModelConfig read_model_config(const nlohmann::json& config, const std::vector<std::string>& tensor_names) {
  ModelConfig mc;
  mc.root = config;
  mc.model_type = cfg_str(config, "model_type", "");
  const nlohmann::json* text = field(config, "text_config");
  if (text && !text->is_object()) field_type_error("text_config", "an object", *text);
  mc.text = text ? *text : config;
  if (mc.model_type.empty()) mc.model_type = cfg_str(mc.text, "model_type", "");
  if (mc.model_type.empty())
    raise("E_MODEL_TYPE_MISSING", Where{"config.json", "", "model_type"}, "a model_type string", "absent");
  // Fields a wrapper keeps at the top level only (eos ids, tie flag) are visible to the family through text.
  if (text) {
    for (const char* key : {"eos_token_id", "tie_word_embeddings", "bos_token_id", "pad_token_id"})
      if (!mc.text.contains(key) && config.contains(key)) mc.text[key] = config[key];
  }
  const std::string mm = "model.language_model.";
  bool wrapped = std::any_of(tensor_names.begin(), tensor_names.end(),
                             [&](const std::string& n) { return n.rfind(mm, 0) == 0; });
  mc.prefix = wrapped ? mm : "model.";
  return mc;
}

std::unique_ptr<Model> create_model(const ModelConfig& config) {
  const Family* f = find_family(config.model_type);
  if (!f) {
    std::string known;
    for (const auto& t : known_model_types()) known += (known.empty() ? "" : ", ") + t;
    raise("E_MODEL_TYPE_UNKNOWN", Where{"config.json", "", "model_type"}, "one of " + known,
          "'" + config.model_type + "'");
  }
  if (!f->factory)
    raise("E_MODEL_TYPE_UNSUPPORTED", Where{"config.json", "", "model_type"},
          "a family implemented in this build", "'" + config.model_type + "' (no model spec yet)");
  return f->factory(config);
}

std::vector<std::string> known_model_types() {
  std::vector<std::string> r;
  for (const Family& f : kFamilies) {
    r.emplace_back(f.model_type);
    if (!f.text_type.empty()) r.emplace_back(f.text_type);
  }
  return r;
}

}  // namespace bloomery
