// tokenizer.json "normalizer": Unicode normalization forms (utf8proc), Prepend and string Replace, alone or
// in a Sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bloomery {

class Normalizer {
 public:
  enum class Form { NFC, NFD, NFKC, NFKD, Prepend, Replace };
  // null -> identity. Anything else but NFC/NFD/NFKC/NFKD, Prepend, Replace with a String pattern (or a
  // Sequence of them) is refused with E_TOK_UNSUPPORTED naming the JSON path.
  static Normalizer from_json(const nlohmann::json& j, const std::string& file);

  bool empty() const { return steps_.empty(); }
  // Input must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  struct Step {
    Form form;
    std::string a, b;  // Prepend: a = prefix; Replace: a -> b
  };
  static void parse(const nlohmann::json& j, const std::string& file, const std::string& path,
                    std::vector<Step>& steps);
  std::vector<Step> steps_;
};

}  // namespace bloomery
