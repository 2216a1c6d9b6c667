// "Did you mean …?": the known name closest to a mistyped one (edit distance), for flags and env variables.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bloomery::server {

// Levenshtein distance (insert, delete, substitute: cost 1 each).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word` (ties: the earlier candidate); empty when there are no candidates.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace bloomery::server
