// tokenizer.json "normalizer": Unicode normalization forms (utf8proc), alone or in a Sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bloomery {

class Normalizer {
 public:
  enum class Form { NFC, NFD, NFKC, NFKD };
  // null -> identity. Anything else but NFC/NFD/NFKC/NFKD (or a Sequence of them) is refused with
  // E_TOK_UNSUPPORTED naming the JSON path.
  static Normalizer from_json(const nlohmann::json& j, const std::string& file);

  bool empty() const { return steps_.empty(); }
  // Input must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  static void parse(const nlohmann::json& j, const std::string& file, const std::string& path,
                    std::vector<Form>& steps);
  std::vector<Form> steps_;
};

}  // namespace bloomery
