#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace bloomery {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<char*>(buf);
}

// Per-thread scratch: match data and a JIT stack large enough for long whitespace runs.
struct Scratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mc = nullptr;
  pcre2_jit_stack* js = nullptr;
  Scratch() {
    md = pcre2_match_data_create(32, nullptr);
    mc = pcre2_match_context_create(nullptr);
    js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (mc && js) pcre2_jit_stack_assign(mc, nullptr, js);
  }
  ~Scratch() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    pcre2_jit_stack_free(js);
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Unicode White_Space, which is what Oniguruma's (and so HF's) \s matches. PCRE2's UCP \s also matches
// U+180E MONGOLIAN VOWEL SEPARATOR (through \h), which HF does not treat as a space.
constexpr const char* kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S outside character classes and \s inside them to the explicit White_Space set. (\S inside
// a class has no PCRE2 spelling without class subtraction and is left as is; no known tokenizer uses it.)
std::string onig_spaces(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[++i];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out.push_back(c);
        out.push_back(n);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(p, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& file, const std::string& where_field)
    : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  std::string translated = onig_spaces(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code_)
    raise("E_TOK_REGEX", Where{file, {}, where_field}, "a pattern PCRE2 compiles",
          pattern + " (" + pcre2_message(err) + " at offset " + std::to_string(offset) + ")");
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  pcre2_code_free(code_);
}

bool Regex::find(std::string_view subject, size_t offset, Match& m) const {
  Scratch& s = scratch();
  auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = jit_ ? pcre2_jit_match(code_, data, subject.size(), offset, PCRE2_NO_UTF_CHECK, s.md, s.mc)
                : pcre2_match(code_, data, subject.size(), offset, PCRE2_NO_UTF_CHECK, s.md, s.mc);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0)
    raise("E_TOK_REGEX", Where{{}, {}, "pre_tokenizer"}, "a completed match",
          pattern_ + ": " + pcre2_message(rc));
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
  m.start = ov[0];
  m.end = ov[1];
  return true;
}

size_t Regex::char_length(std::string_view s, size_t i) {
  size_t len = utf8::valid_sequence_length(s, i);
  return len == 0 ? 1 : len;
}

void Regex::find_all(std::string_view subject, std::vector<Match>& out) const {
  for_each(subject, [&](const Match& m) { out.push_back(m); });
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    auto u = static_cast<unsigned char>(c);
    bool plain =
        u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace bloomery
