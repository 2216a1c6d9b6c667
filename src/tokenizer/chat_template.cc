#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "core/file.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_parser.h"

namespace bloomery {

ChatTemplate ChatTemplate::from_source(std::string source, std::string origin_for_errors) {
  ChatTemplate t;
  t.tpl_ = std::make_shared<const jinja::Template>(jinja::parse_template(source, origin_for_errors));
  t.source_ = std::move(source);
  t.origin_ = std::move(origin_for_errors);
  return t;
}

ChatTemplate ChatTemplate::from_folder(const std::filesystem::path& folder) {
  std::filesystem::path jinja_file = folder / "chat_template.jinja";
  if (std::filesystem::exists(jinja_file))
    return from_source(read_text_file(jinja_file), jinja_file.string());
  std::filesystem::path cfg_file = folder / "tokenizer_config.json";
  if (!std::filesystem::exists(cfg_file))
    raise("E_TPL_MISSING", Where{folder.string(), "", ""}, "chat_template.jinja or tokenizer_config.json",
          "neither file");
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(read_text_file(cfg_file));
  } catch (const nlohmann::json::exception& e) {
    raise("E_TPL_MISSING", Where{cfg_file.string(), "", ""}, "valid JSON", e.what());
  }
  if (!cfg.is_object() || !cfg.contains("chat_template"))
    raise("E_TPL_MISSING", Where{cfg_file.string(), "", "chat_template"}, "a chat_template entry", "none");
  const nlohmann::json& ct = cfg["chat_template"];
  std::string origin = cfg_file.string() + "#chat_template";
  if (ct.is_string()) return from_source(ct.get<std::string>(), origin);
  if (ct.is_array()) {
    for (const auto& entry : ct) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return from_source(entry["template"].get<std::string>(), origin + "[default]");
    }
    raise("E_TPL_MISSING", Where{cfg_file.string(), "", "chat_template"},
          "a {name: \"default\", template} entry", "a list without one");
  }
  raise("E_TPL_MISSING", Where{cfg_file.string(), "", "chat_template"}, "a string or a list of templates",
        std::string(ct.type_name()));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object())
    raise("E_TPL_RENDER", Where{origin_, "", "context"}, "a JSON object", std::string(context.type_name()));
  jinja::Value ctx;
  try {
    ctx = jinja::from_json(context);
  } catch (const jinja::EvalError& e) {
    raise(e.id, Where{origin_, "", "context"}, "", "", e.what());
  }
  return jinja::Interpreter::render(*tpl_, ctx, origin_);
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json::parse(context.dump()));
}

}  // namespace bloomery
