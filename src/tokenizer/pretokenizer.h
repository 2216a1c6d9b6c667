// tokenizer.json "pre_tokenizer": Split (regex or string, any delimiter behaviour) and ByteLevel, alone or in
// a Sequence; cuts normalized text into the words the BPE model encodes one by one.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace bloomery {

class PreTokenizer {
 public:
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

  // Anything else (other pre-tokenizer types, a Split after ByteLevel, ...) is refused with E_TOK_UNSUPPORTED
  // naming the JSON path.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& file);

  // True when a ByteLevel step is present: pieces are then raw bytes the model must spell byte-level.
  bool byte_level() const { return byte_level_; }

  // Calls emit(piece) for every non-empty word of `text` (valid UTF-8), in order.
  void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;

 private:
  struct Step {
    enum class Kind { Split, ByteLevel } kind;
    std::shared_ptr<Regex> regex;  // Split pattern, or ByteLevel's GPT-2 pattern when use_regex
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  static void parse(const nlohmann::json& j, const std::string& file, const std::string& path,
                    std::vector<Step>& steps);
  void run(size_t step, std::string_view piece, const std::function<void(std::string_view)>& emit) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace bloomery
