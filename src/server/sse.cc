#include "server/sse.h"

namespace bloomery::server {

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_data(const nlohmann::json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

std::string sse_data(const nlohmann::ordered_json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

std::string sse_error_line(const nlohmann::json& j) {
  return "error: " + dump_json(j) + "\n\n";
}

std::string sse_comment(const std::string& text) {
  std::string out;
  // Every line of a comment starts with ':' so a newline in `text` cannot end the comment early.
  size_t start = 0;
  while (true) {
    size_t nl = text.find('\n', start);
    out += ": " + text.substr(start, nl == std::string::npos ? std::string::npos : nl - start) + "\n";
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out + "\n";
}

}  // namespace bloomery::server
