#include "server/api_error.h"

#include <fmt/format.h>

namespace bloomery::server {

nlohmann::json error_body(const ApiError& e) {
  nlohmann::json inner = {{"code", e.status}, {"message", e.what()}, {"type", e.type}};
  for (auto it = e.extra.begin(); it != e.extra.end(); ++it) inner[it.key()] = it.value();
  return {{"error", inner}};
}

void bad_field(const std::string& field, const std::string& expected, const nlohmann::json& found) {
  std::string shown = found.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  throw ApiError(400, "invalid_request_error",
                 fmt::format("'{}': expected {}, found {}", field, expected, shown));
}

void bad_request(const std::string& message) {
  throw ApiError(400, "invalid_request_error", message);
}

ApiError not_found(const std::string& message) {
  return ApiError(404, "not_found_error", message);
}
ApiError unauthorized() {
  return ApiError(401, "authentication_error", "Invalid API Key");
}
ApiError loading(const std::string& message) {
  return ApiError(503, "unavailable_error", message);
}
ApiError not_supported(const std::string& message) {
  return ApiError(501, "not_supported_error", message);
}
ApiError server_error(const std::string& message) {
  return ApiError(500, "server_error", message);
}
ApiError exceed_context(int64_t n_prompt_tokens, int64_t n_ctx) {
  return ApiError(400, "exceed_context_size_error",
                  fmt::format("the request exceeds the available context size: {} prompt tokens, context {} "
                              "per slot (one token is kept for the reply)",
                              n_prompt_tokens, n_ctx),
                  {{"n_prompt_tokens", n_prompt_tokens}, {"n_ctx", n_ctx}});
}

}  // namespace bloomery::server
