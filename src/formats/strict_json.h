// JSON parsing that refuses duplicate object keys (nlohmann's DOM parser silently keeps the last one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace bloomery {

// Outcome of a strict parse: either `value` is set, or `error` describes the first problem.
struct StrictJsonResult {
  nlohmann::json value;
  bool ok = false;
  bool duplicate = false;         // the failure was a repeated key
  std::vector<std::string> path;  // for a duplicate: the object keys leading to it, the repeated key last
  std::string error;              // human description (parser message, or "key 'x' appears twice")
};

// Parses `text` as JSON; fails on syntax errors and on any object holding the same key twice, at any depth.
// Never throws for bad input.
StrictJsonResult parse_json_strict(std::string_view text);

}  // namespace bloomery
