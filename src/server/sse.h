// Server-sent event framing as llama-server writes it (serving.md §3): "data: <one-line JSON>\n\n", the
// terminating "data: [DONE]\n\n", and "error: <JSON>\n\n" for llama.cpp clients of /completion.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace bloomery::server {

// JSON on one line, invalid UTF-8 replaced by U+FFFD (never fails on a byte string).
std::string dump_json(const nlohmann::json& j);
std::string dump_json(const nlohmann::ordered_json& j);  // keeps the order the fields were written in

std::string sse_data(const nlohmann::json& j);
std::string sse_data(const nlohmann::ordered_json& j);
std::string sse_done();
std::string sse_error_line(const nlohmann::json& j);
// A comment line (keep-alive); SSE parsers ignore it.
std::string sse_comment(const std::string& text);

}  // namespace bloomery::server
