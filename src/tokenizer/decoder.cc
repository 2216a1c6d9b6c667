#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace bloomery {

void Decoder::parse(const nlohmann::json& j, const std::string& file, const std::string& path,
                    std::vector<Step>& steps, bool& fused) {
  auto unsupported = [&](const std::string& field, const std::string& expected, const std::string& found) {
    raise("E_TOK_UNSUPPORTED", Where{file, {}, field}, expected, found);
  };
  if (j.is_null()) return;
  std::string type =
      j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  Step s;
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array())
      unsupported(path + ".decoders", "an array", j.dump());
    for (size_t i = 0; i < j["decoders"].size(); ++i)
      parse(j["decoders"][i], file, path + ".decoders[" + std::to_string(i) + "]", steps, fused);
    return;
  } else if (type == "ByteLevel") {
    s.kind = Step::Kind::ByteLevel;
  } else if (type == "ByteFallback") {
    s.kind = Step::Kind::ByteFallback;
  } else if (type == "Fuse") {
    s.kind = Step::Kind::Fuse;
    fused = true;
  } else if (type == "Replace") {
    s.kind = Step::Kind::Replace;
    const auto& pat = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    if (!pat.is_object() || !pat.contains("String") || !pat["String"].is_string() ||
        pat["String"].get<std::string>().empty())
      unsupported(path + ".pattern", "{\"String\": <non-empty>}", pat.dump());
    if (!j.contains("content") || !j["content"].is_string())
      unsupported(path + ".content", "a string", j.dump());
    s.from = pat["String"].get<std::string>();
    s.to = j["content"].get<std::string>();
  } else if (type == "Strip") {
    s.kind = Step::Kind::Strip;
    std::string content = j.value("content", std::string(" "));
    size_t i = 0;
    if (content.empty() || utf8::valid_sequence_length(content, 0) != content.size())
      unsupported(path + ".content", "one character", content);
    s.strip_char = utf8::next(content, i);
    s.strip_start = j.value("start", size_t{0});
    // Stripping the end of the whole text cannot be done token by token in a stream.
    if (j.value("stop", size_t{0}) != 0) unsupported(path + ".stop", "0", j["stop"].dump());
    s.fused_before = fused;
  } else if (type == "Metaspace") {
    s.kind = Step::Kind::Metaspace;
    s.from = j.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme =
        j.value("prepend_scheme", std::string(j.value("add_prefix_space", true) ? "always" : "never"));
    s.prepend = scheme != "never";
  } else {
    unsupported(path, "ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace or a Sequence of them",
                type.empty() ? j.dump() : type);
  }
  steps.push_back(std::move(s));
}

Decoder Decoder::from_json(const nlohmann::json& j, const std::string& file) {
  Decoder d;
  bool fused = false;
  parse(j, file, "decoder", d.steps_, fused);
  return d;
}

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void Decoder::append(std::string_view token, bool first, std::string& out) const {
  if (steps_.empty()) {
    out.append(token);
    return;
  }
  std::string t(token);
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::Kind::ByteLevel:
        // Tokens spelled in the byte alphabet become their bytes; others (added tokens such as "<think>\n")
        // keep their own UTF-8, as HF does.
        if (auto bytes = byte_level::decode(t)) t = std::move(*bytes);
        break;
      case Step::Kind::ByteFallback:
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
          int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
          if (hi >= 0 && lo >= 0) t = std::string(1, static_cast<char>(hi * 16 + lo));
        }
        break;
      case Step::Kind::Fuse:
        break;  // concatenation is what appending token by token does
      case Step::Kind::Replace:
        replace_all(t, s.from, s.to);
        break;
      case Step::Kind::Strip: {
        if (s.fused_before && !first) break;
        size_t i = 0, cut = 0;
        for (size_t n = 0; n < s.strip_start && i < t.size(); ++n) {
          if (utf8::valid_sequence_length(t, i) == 0) break;
          size_t j = i;
          if (utf8::next(t, j) != s.strip_char) break;
          i = j;
          cut = j;
        }
        t.erase(0, cut);
        break;
      }
      case Step::Kind::Metaspace: {
        bool leading = t.compare(0, s.from.size(), s.from) == 0;
        replace_all(t, s.from, " ");
        if (first && s.prepend && leading) t.erase(0, 1);
        break;
      }
    }
  }
  out += t;
}

}  // namespace bloomery
