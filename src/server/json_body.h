// Request bodies to JSON in time linear in their size, with a nesting limit, and errors in bloomery's words
// (no parser text). Separate from request_parse so the fuzzer links it alone.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace bloomery::server {

// Deepest nesting a request body may have (a 400 past it): deep enough for JSON schemas in tools.
inline constexpr size_t kMaxBodyDepth = 128;

// JSON text to a value in time linear in its size (objects of any key count), nesting at most `max_depth`
// levels. Errors are 400s (ApiError): a syntax error names the byte, a number beyond a double's range names
// its field ("'temperature': expected a number a double can hold, found 1e999").
nlohmann::ordered_json parse_json_body(const std::string& body, size_t max_depth);

}  // namespace bloomery::server
