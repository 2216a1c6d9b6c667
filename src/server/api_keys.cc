#include "server/api_keys.h"

#include <cctype>
#include <fstream>

#include <fmt/format.h>

#include "core/error.h"

namespace bloomery::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The line without its comment: '#' opens one at the start or after whitespace ("K1 # laptop"); a '#' inside
// a key ("ab#cd") stays, since generated keys may hold one.
std::string_view strip_comment(std::string_view line) {
  for (size_t i = 0; i < line.size(); ++i)
    if (line[i] == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1]))))
      return line.substr(0, i);
  return line;
}

}  // namespace

std::vector<std::string> split_api_keys(std::string_view value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view k = trim(value.substr(start, comma - start));
    if (!k.empty()) out.emplace_back(k);
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> read_api_key_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in)
    raise("E_FLAG_VALUE", Where{path, "", flag}, "a readable file with one API key per line", "no such file",
          "or it is not readable");
  std::vector<std::string> keys;
  std::string line;
  size_t lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    for (auto& k : split_api_keys(strip_comment(line))) keys.push_back(std::move(k));
  }
  if (keys.empty())
    raise("E_FLAG_VALUE", Where{path, "", flag}, "at least one API key (one per line, '#' comments)",
          fmt::format("none in {} line{}", lines, lines == 1 ? "" : "s"),
          "an empty key file would accept every client; remove the flag to run without keys");
  return keys;
}

bool api_key_accepted(const std::vector<std::string>& keys, std::string_view given) {
  bool ok = false;
  for (const auto& k : keys) {
    unsigned diff = static_cast<unsigned>(k.size() ^ given.size());
    for (size_t i = 0; i < k.size(); ++i)
      diff |= static_cast<unsigned char>(k[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    ok |= diff == 0;
  }
  return ok;
}

}  // namespace bloomery::server
