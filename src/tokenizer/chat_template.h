// A model's chat template (Jinja) loaded from its folder or given as text, rendered the way Hugging Face's
// apply_chat_template renders it with Python Jinja2 (trim_blocks, lstrip_blocks, tojson, raise_exception,
// strftime_now, loop controls, {% generation %}).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace bloomery::jinja {
struct Template;
}

namespace bloomery {

class ChatTemplate {
 public:
  // chat_template.jinja if present, else tokenizer_config.json's "chat_template" (a string, or a list of
  // {name, template} from which "default" is taken). E_TPL_MISSING when neither exists.
  static ChatTemplate from_folder(const std::filesystem::path& folder);
  // Parses now: E_TPL_SYNTAX / E_TPL_UNSUPPORTED with "origin:line:column".
  static ChatTemplate from_source(std::string source, std::string origin_for_errors);

  // context: {messages, tools?, add_generation_prompt, enable_thinking?, bos_token, eos_token, ...}; its
  // top-level keys become template variables. To match transformers' apply_chat_template exactly, pass what
  // it passes: messages, tools (null when the request has none), documents (null), add_generation_prompt,
  // the tokenizer's special tokens (bos_token, eos_token, unk_token, pad_token, ... from
  // tokenizer_config.json; null when unset), and the chat_template_kwargs (enable_thinking, ...) on top. Pass
  // ordered_json (e.g. ordered_json::parse of the request) so key order, which `tojson` prints, is the
  // request's order, as in Python. Errors: E_TPL_RAISE (the template called raise_exception; the note holds
  // its message), E_TPL_RENDER (what Python Jinja2 would raise too), E_TPL_UNSUPPORTED (a construct reached
  // at render that bloomery does not implement).
  std::string render(const nlohmann::ordered_json& context) const;
  // Same, from nlohmann::json (whose objects are key-sorted: tojson output follows that order).
  std::string render(const nlohmann::json& context) const;

  const std::string& source() const { return source_; }
  const std::string& origin() const { return origin_; }

 private:
  std::string source_;
  std::string origin_;
  std::shared_ptr<const jinja::Template> tpl_;
};

}  // namespace bloomery
