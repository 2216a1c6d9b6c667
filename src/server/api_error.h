// Request errors in OpenAI format: {"error": {"code": <HTTP status>, "message", "type"}} (serving.md §4).
// A handler throws ApiError; the route wrapper turns it into the response, and the server keeps serving.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace bloomery::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string message, nlohmann::json extra = nlohmann::json::object())
      : std::runtime_error(message), status(status), type(std::move(type)), extra(std::move(extra)) {}
  int status;
  std::string type;
  nlohmann::json extra;  // more fields inside "error" (n_prompt_tokens, n_ctx for exceed_context_size_error)
};

// The JSON body of an error.
nlohmann::json error_body(const ApiError& e);

// 400 invalid_request_error naming the field: "'temperature': expected a number, found \"hot\"".
[[noreturn]] void bad_field(const std::string& field, const std::string& expected,
                            const nlohmann::json& found);
[[noreturn]] void bad_request(const std::string& message);
ApiError not_found(const std::string& message);
ApiError unauthorized();
ApiError loading(const std::string& message = "Loading model");
ApiError not_supported(const std::string& message);
ApiError server_error(const std::string& message);
ApiError exceed_context(int64_t n_prompt_tokens, int64_t n_ctx);

}  // namespace bloomery::server
