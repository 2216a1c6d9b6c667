// libFuzzer target: arbitrary bytes as an HTTP request body. The body parser (src/server/json_body.cc) must
// either return a value or refuse with a 400 ApiError in its own words (no parser text); anything else (a
// crash, a sanitizer report, another exception, a 500) is a finding. Accepted values must round-trip: dumping
// and parsing again gives an equal value, and it equals nlohmann's own parse: the linear-time builder keeps
// every key and element.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/json_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  nlohmann::ordered_json v;
  try {
    v = bloomery::server::parse_json_body(body, 32);
  } catch (const bloomery::server::ApiError& e) {
    // bloomery's own words: a syntax error, or a field named in quotes (the parser's text is never passed on;
    // the message may quote the client's bytes, which is why the start is what is checked).
    const std::string m = e.what();
    if (e.status != 400 || !(m.rfind("Invalid JSON in the request body", 0) == 0 || m.rfind("'", 0) == 0))
      std::abort();
    return 0;
  }
  // What was accepted is JSON, and the same value nlohmann's own (quadratic) DOM parser builds: keys in first
  // position, the last duplicate's value.
  const nlohmann::ordered_json reference = nlohmann::ordered_json::parse(body, nullptr, false);
  if (reference.is_discarded()) std::abort();
  if (reference.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) !=
      v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
    std::abort();
  // Round trip through the builder itself (the reference for what the builder must keep). Strings that are
  // not UTF-8 cannot be dumped strictly: replaced on both sides.
  const std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const nlohmann::ordered_json again = bloomery::server::parse_json_body(text, 64);
  if (again.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) != text) std::abort();
  return 0;
}
