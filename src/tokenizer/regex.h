// A PCRE2 regex (UTF + UCP, JIT-compiled when possible) used for tokenizer.json Split patterns; matching is
// thread-safe (each thread has its own match data and JIT stack).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace bloomery {

class Regex {
 public:
  // Compiles `pattern`; throws E_TOK_REGEX naming `where_field` (the tokenizer.json path) on a bad pattern.
  Regex(const std::string& pattern, const std::string& file, const std::string& where_field);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  struct Match {
    size_t start;
    size_t end;
  };
  // All non-overlapping matches in `subject` (valid UTF-8), left to right; after an empty match the search
  // resumes one character later. Appends to `out`.
  void find_all(std::string_view subject, std::vector<Match>& out) const;

  // The first match at or after byte `offset`; false when there is none.
  bool find(std::string_view subject, size_t offset, Match& m) const;

  // Calls fn(Match) for each match of find_all, without storing them.
  template <typename Fn>
  void for_each(std::string_view subject, Fn&& fn) const {
    size_t offset = 0;
    Match m;
    while (offset <= subject.size() && find(subject, offset, m)) {
      fn(m);
      if (m.end > m.start) {
        offset = m.end;
      } else {
        if (m.end >= subject.size()) break;
        offset = m.end + char_length(subject, m.end);
      }
    }
  }

  // A regex source that matches `literal` exactly.
  static std::string escape(std::string_view literal);

 private:
  static size_t char_length(std::string_view s, size_t i);
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
  std::string pattern_;
};

}  // namespace bloomery
