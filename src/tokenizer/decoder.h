// tokenizer.json "decoder": turns one token's vocabulary spelling into the bytes it stands for (ByteLevel,
// ByteFallback "<0xE3>" pieces, Replace, Strip, Fuse, Metaspace), token by token so streams can use it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bloomery {

class Decoder {
 public:
  // Unsupported decoder types or options are refused with E_TOK_UNSUPPORTED naming the JSON path.
  static Decoder from_json(const nlohmann::json& j, const std::string& file);

  // Appends the bytes of `token` (its vocabulary spelling) to `out`. `first`: it is the first token of the
  // text, where Strip / Metaspace drop a leading space. The bytes are raw: they may end inside a UTF-8
  // character.
  void append(std::string_view token, bool first, std::string& out) const;

  // No decoder at all: HF joins the token strings with a space.
  bool joins_with_space() const { return steps_.empty(); }

 private:
  struct Step {
    enum class Kind { ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace } kind;
    std::string from, to;  // Replace: pattern and content; Metaspace: replacement
    char32_t strip_char = U' ';
    size_t strip_start = 0;
    bool fused_before = false;  // Strip after Fuse applies to the whole text, i.e. to the first token only
    bool prepend = true;  // Metaspace: a leading replacement char on the first token was added at encode
  };
  static void parse(const nlohmann::json& j, const std::string& file, const std::string& path,
                    std::vector<Step>& steps, bool& fused);
  std::vector<Step> steps_;
};

}  // namespace bloomery
