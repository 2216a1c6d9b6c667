// JSON schema → GBNF, for response_format json_schema, llama-server's json_schema field, -j and tool-call
// arguments. Output follows the schema by construction: only listed properties (in their order; required
// ones always present), bounded numbers. A keyword the converter cannot enforce is refused (GrammarError
// naming the keyword and where it is), never silently dropped.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace bloomery::server {

// A grammar whose `root` is a JSON value following `schema`. Extra rules are prefixed with `prefix` so that
// several converted schemas can live in one grammar (tool calls); then `root_name` names the value rule.
std::string schema_to_gbnf(const nlohmann::ordered_json& schema, const std::string& root_name = "root",
                           const std::string& prefix = "");

// Any JSON object (response_format json_object).
std::string json_object_gbnf();

// A GBNF string literal for `text` (quotes included).
std::string gbnf_literal(const std::string& text);

// The shared JSON rules (value, object, array, string, number, ws) that converted schemas refer to.
std::string json_base_rules();

}  // namespace bloomery::server
