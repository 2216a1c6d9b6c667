// The regular expressions of compressed-tensors "re:" module patterns (Python `re` syntax, the subset that
// names modules), compiled to a Thompson NFA and matched by simulating it: matching takes time linear in
// pattern size × name length whatever the pattern, so a hostile config cannot stall the loader the way a
// backtracking engine (std::regex, Python re) can on patterns like "(a*)*b".
#pragma once

#include <bitset>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bloomery {

// A pattern outside the supported subset, malformed, or too large once its counted repeats are expanded.
struct ModuleRegexError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Supported: literals, `.`, classes `[...]`/`[^...]` with ranges and \d \w \s, escapes (\d \D \w \W \s \S,
// \t \n \r \f \v \xHH, escaped punctuation), groups `(...)` `(?:...)` `(?P<name>...)`, `|`, the quantifiers
// `* + ? {m} {m,} {,n} {m,n}` (lazy and possessive forms match the same names), anchors `^ $ \A \Z \b \B`.
// Refused with ModuleRegexError: backreferences, lookaround, inline flags, conditionals. Matching is on bytes
// (module names are ASCII); `.` matches any byte but '\n' as in Python.
class ModuleRegex {
 public:
  static constexpr size_t kMaxProgram = 20000;  // instructions after expanding counted repeats
  static constexpr int kMaxRepeat = 1000;       // largest m or n in {m,n}

  static ModuleRegex compile(std::string_view pattern);

  // Python re.match: whether a match starts at the first byte (it need not reach the last).
  bool match_prefix(std::string_view s) const;

  size_t program_size() const { return program_.size(); }

  enum class Op : uint8_t {
    Set,
    Split,
    Jump,
    Match,
    Begin,
    End,
    EndOrNewline,
    WordBoundary,
    NotWordBoundary
  };
  struct Inst {
    Op op = Op::Match;
    uint32_t a = 0;  // Set: index into sets_; Split/Jump: first target
    uint32_t b = 0;  // Split: second target
  };

 private:
  friend class ModuleRegexCompiler;
  std::vector<Inst> program_;
  std::vector<std::bitset<256>> sets_;
};

}  // namespace bloomery
