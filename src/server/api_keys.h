// API keys from --api-key and --api-key-file: one place that reads them, so the two agree on what a key is
// (surrounding whitespace, comma separators and '#' comments are never part of one) and a key file that holds
// no key refuses to start instead of opening the server to every client.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bloomery::server {

// "K1, K2 ,K3" → {"K1", "K2", "K3"}: split on commas, each key trimmed, empty pieces dropped.
std::vector<std::string> split_api_keys(std::string_view value);

// Keys from a file: one or more per line (comma-separated), blank lines skipped, a '#' at the start of a line
// or after whitespace starts a comment. Throws E_FLAG_VALUE naming `flag` when the file cannot be read or
// holds no key.
std::vector<std::string> read_api_key_file(const std::string& flag, const std::string& path);

// True when `given` is one of `keys` (compared in time independent of where the first difference lies).
bool api_key_accepted(const std::vector<std::string>& keys, std::string_view given);

}  // namespace bloomery::server
