// Tool calls in the model's own syntax, as its chat template teaches it, parsed out of the generated text
// into OpenAI tool_calls; and the grammar that forces a call (tool_choice "required" or a named function).
//   Qwen3 (JSON):    <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   GLM-4.5 style:   <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
//   Qwen3.5 / Coder: <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
// The syntax is read off the chat template's text (the GLM and XML templates name their tags).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bloomery::server {

enum class ToolSyntax { QwenJson, Glm, QwenXml };
ToolSyntax tool_syntax_of(const std::string& template_source);
const char* tool_syntax_name(ToolSyntax s);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as text
};

// Streaming: push() the content text as it is generated; text that may open a call is held back until it
// is one, a finished call comes out parsed, anything else comes out as content. A call that does not parse
// stays content (the client sees what the model wrote).
class ToolCallParser {
 public:
  // tools: the request's tools (their parameter schemas decide whether a GLM/XML value "12" is a string).
  ToolCallParser(ToolSyntax syntax, const nlohmann::ordered_json& tools);
  struct Out {
    std::string content;
    std::vector<ToolCall> calls;
  };
  Out push(const std::string& text);
  Out flush();
  size_t n_calls() const { return n_calls_; }

 private:
  void emit(Out& out, const std::string& text);
  bool parse_call(const std::string& body, ToolCall& call) const;
  nlohmann::ordered_json value_for(const std::string& fn, const std::string& key,
                                   const std::string& raw) const;
  ToolSyntax syntax_;
  nlohmann::ordered_json tools_;
  std::string buf_;
  std::string held_;
  bool in_call_ = false;
  size_t n_calls_ = 0;
};

// GBNF forcing one call in `syntax` to one of `tools` (all, or only `only_name`). Throws GrammarError when a
// parameter schema cannot be compiled, or bloomery's ApiError-free std::invalid_argument when `only_name`
// names no tool.
std::string tool_call_grammar(ToolSyntax syntax, const nlohmann::ordered_json& tools,
                              const std::string& only_name);

}  // namespace bloomery::server
