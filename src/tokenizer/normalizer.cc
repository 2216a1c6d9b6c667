#include "tokenizer/normalizer.h"

#include <cstdlib>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace bloomery {

void Normalizer::parse(const nlohmann::json& j, const std::string& file, const std::string& path,
                       std::vector<Step>& steps) {
  if (j.is_null()) return;
  std::string type =
      j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (type == "NFC") {
    steps.push_back({Form::NFC, {}, {}});
  } else if (type == "NFD") {
    steps.push_back({Form::NFD, {}, {}});
  } else if (type == "NFKC") {
    steps.push_back({Form::NFKC, {}, {}});
  } else if (type == "NFKD") {
    steps.push_back({Form::NFKD, {}, {}});
  } else if (type == "Prepend" && j.contains("prepend") && j["prepend"].is_string()) {
    steps.push_back({Form::Prepend, j["prepend"].get<std::string>(), {}});
  } else if (type == "Replace" && j.contains("pattern") && j["pattern"].is_object() &&
             j["pattern"].contains("String") && j["pattern"]["String"].is_string() &&
             !j["pattern"]["String"].get<std::string>().empty() && j.contains("content") &&
             j["content"].is_string()) {
    steps.push_back(
        {Form::Replace, j["pattern"]["String"].get<std::string>(), j["content"].get<std::string>()});
  } else if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      parse(j["normalizers"][i], file, path + ".normalizers[" + std::to_string(i) + "]", steps);
  } else {
    raise("E_TOK_UNSUPPORTED", Where{file, {}, path},
          "null, NFC, NFD, NFKC, NFKD, Prepend, Replace (String pattern) or a Sequence of them",
          type.empty() ? j.dump() : type);
  }
}

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& file) {
  Normalizer n;
  parse(j, file, "normalizer", n.steps_);
  return n;
}

namespace {

// Text made only of code points below U+0300 is unchanged by NFC: no combining mark follows the precomposed
// Latin letters, and none of these characters has NFC_Quick_Check No/Maybe. (NFD would change them.)
bool below_combining(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x80) continue;
    // Lead bytes 0xC2..0xCB encode U+0080..U+02FF.
    if (c >= 0xC2 && c <= 0xCB) continue;
    if (c >= 0x80 && c <= 0xBF) continue;  // continuation byte of such a sequence
    return false;
  }
  return true;
}

std::string map(std::string_view s, int options) {
  utf8proc_uint8_t* dst = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                        static_cast<utf8proc_ssize_t>(s.size()), &dst,
                        static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) raise("E_TOK_NORMALIZE", Where{}, "valid UTF-8 text", std::string(utf8proc_errmsg(n)));
  std::string out(reinterpret_cast<char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

}  // namespace

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  for (const Step& step : steps_) {
    switch (step.form) {
      case Form::NFC:
        if (!below_combining(cur)) cur = map(cur, UTF8PROC_COMPOSE);
        break;
      case Form::NFD:
        cur = map(cur, UTF8PROC_DECOMPOSE);
        break;
      case Form::NFKC:
        cur = map(cur, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
        break;
      case Form::NFKD:
        cur = map(cur, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
        break;
      case Form::Prepend:
        if (!cur.empty()) cur.insert(0, step.a);  // HF prepends only to non-empty text
        break;
      case Form::Replace: {
        std::string out;
        size_t pos = 0;
        for (size_t hit; (hit = cur.find(step.a, pos)) != std::string::npos; pos = hit + step.a.size())
          out.append(cur, pos, hit - pos).append(step.b);
        out.append(cur, pos, std::string::npos);
        cur = std::move(out);
        break;
      }
    }
  }
  return cur;
}

}  // namespace bloomery
