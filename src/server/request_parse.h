// Request bodies to GenSpec: every field of serving.md §2.3–§2.5 that bloomery honours is type- and
// range-checked, and a bad one is a 400 naming the field; unknown fields are ignored (llama-server does).
#pragma once

#include <nlohmann/json.hpp>

#include "server/flags.h"
#include "server/generation.h"
#include "server/json_body.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace bloomery::server {

enum class Api { Chat, Completions, LlamaCompletion };

// A request body: parse_json_body, and a 400 when it is not a JSON object.
nlohmann::ordered_json parse_body(const std::string& body);

// An optional field (absent or null = `dflt`); any other type is a 400 naming the field.
bool field_bool(const nlohmann::ordered_json& body, const char* key, bool dflt);
std::string field_string(const nlohmann::ordered_json& body, const char* key, const std::string& dflt);

// Sampling and generation fields shared by all three completion routes (defaults from the flags).
void parse_generation_fields(const nlohmann::ordered_json& body, const ServerOptions& o, Api api,
                             GenSpec& spec);

// The chat template's context for a chat body: messages checked (roles, text-only content), developer →
// system, tools and chat_template_kwargs passed through, add_generation_prompt true.
nlohmann::ordered_json chat_context(const nlohmann::ordered_json& body, const Tokenizer& tok);

// Renders a chat body to the prompt text. A template error is a 400 (the template refused the messages).
std::string render_chat(const nlohmann::ordered_json& body, const ChatTemplate& tpl, const Tokenizer& tok);

// A prompt field: a string, a token array, or a one-element array of either. Strings get the tokenizer's BOS
// when it adds one.
std::vector<int32_t> parse_prompt(const nlohmann::ordered_json& prompt, const Tokenizer& tok,
                                  const char* field);

// True when the rendered prompt ends inside an opened think block.
bool prompt_opens_think(const std::string& prompt);

}  // namespace bloomery::server
