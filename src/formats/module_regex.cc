#include "formats/module_regex.h"

#include <cctype>
#include <limits>
#include <memory>

namespace bloomery {

namespace {

using ByteSet = std::bitset<256>;
constexpr int kUnbounded = -1;

ByteSet range(unsigned char lo, unsigned char hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return s;
}
ByteSet digits() {
  return range('0', '9');
}
// Bytes >= 0x80 count as word bytes so that the letters of UTF-8 names stay inside \w (Python's str \w is
// Unicode-aware); module names are ASCII in practice.
ByteSet word() {
  return range('a', 'z') | range('A', 'Z') | digits() | range('_', '_') | range(0x80, 0xff);
}
ByteSet spaces() {
  ByteSet s;
  for (char c : std::string_view(" \t\n\r\f\v")) s.set(static_cast<unsigned char>(c));
  return s;
}
bool is_word_byte(unsigned char c) {
  return std::isalnum(c) || c == '_' || c >= 0x80;
}

struct Node {
  enum class Kind : uint8_t { Set, Empty, Concat, Alternate, Repeat, Assert } kind = Kind::Empty;
  uint32_t set = 0;             // Set: index into the set table
  ModuleRegex::Op assertion{};  // Assert
  int min = 0, max = 0;         // Repeat (max kUnbounded = no limit)
  std::vector<std::unique_ptr<Node>> children;
};
using NodePtr = std::unique_ptr<Node>;

NodePtr make(Node::Kind kind) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  return n;
}

}  // namespace

// Recursive-descent parser of the pattern into a tree, then code generation into the NFA program.
class ModuleRegexCompiler {
 public:
  explicit ModuleRegexCompiler(std::string_view p) : p_(p) {}

  ModuleRegex run() {
    NodePtr root = alternation(0);
    if (pos_ < p_.size()) fail("unbalanced parenthesis");
    emit(*root);
    push({ModuleRegex::Op::Match, 0, 0});
    out_.sets_ = std::move(sets_);
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw ModuleRegexError(why + " at position " + std::to_string(pos_));
  }
  bool done() const { return pos_ >= p_.size(); }
  char peek() const { return p_[pos_]; }
  bool eat(char c) {
    if (!done() && peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  NodePtr set_node(const ByteSet& s) {
    auto n = make(Node::Kind::Set);
    n->set = static_cast<uint32_t>(sets_.size());
    sets_.push_back(s);
    return n;
  }
  NodePtr assert_node(ModuleRegex::Op op) {
    auto n = make(Node::Kind::Assert);
    n->assertion = op;
    return n;
  }

  NodePtr alternation(int depth) {
    if (depth > 200) fail("groups nested too deeply");
    auto alt = make(Node::Kind::Alternate);
    alt->children.push_back(sequence(depth));
    while (eat('|')) alt->children.push_back(sequence(depth));
    if (alt->children.size() == 1) return std::move(alt->children.front());
    return alt;
  }

  NodePtr sequence(int depth) {
    auto seq = make(Node::Kind::Concat);
    while (!done() && peek() != '|' && peek() != ')') {
      NodePtr atom_node = atom(depth);
      atom_node = quantified(std::move(atom_node));
      seq->children.push_back(std::move(atom_node));
    }
    return seq;
  }

  // Reads one {m,n}-style quantifier if the text at pos_ is one; Python treats any other '{' as a literal.
  bool counted(int& lo, int& hi) {
    size_t i = pos_ + 1;
    auto number = [&](int& v) {
      size_t start = i;
      long long x = 0;
      while (i < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i]))) {
        x = std::min<long long>(x * 10 + (p_[i] - '0'), std::numeric_limits<int>::max());
        ++i;
      }
      v = static_cast<int>(x);
      return i > start;
    };
    int a = 0, b = 0;
    bool has_a = number(a);
    bool comma = i < p_.size() && p_[i] == ',';
    bool has_b = false;
    if (comma) {
      ++i;
      has_b = number(b);
    }
    if (i >= p_.size() || p_[i] != '}') return false;
    if (!comma && !has_a) return false;  // "{}" is literal text
    lo = has_a ? a : 0;
    hi = comma ? (has_b ? b : kUnbounded) : lo;
    pos_ = i + 1;
    if (lo > ModuleRegex::kMaxRepeat || hi > ModuleRegex::kMaxRepeat)
      fail("repeat count above " + std::to_string(ModuleRegex::kMaxRepeat));
    if (hi != kUnbounded && lo > hi) fail("min repeat greater than max repeat");
    return true;
  }

  bool quantifier(int& lo, int& hi) {
    if (done()) return false;
    switch (peek()) {
      case '*':
        ++pos_, lo = 0, hi = kUnbounded;
        return true;
      case '+':
        ++pos_, lo = 1, hi = kUnbounded;
        return true;
      case '?':
        ++pos_, lo = 0, hi = 1;
        return true;
      case '{':
        return counted(lo, hi);
      default:
        return false;
    }
  }

  NodePtr quantified(NodePtr node) {
    int lo = 0, hi = 0;
    if (!quantifier(lo, hi)) return node;
    if (node->kind == Node::Kind::Assert) fail("nothing to repeat");
    // Lazy (x*?) and possessive (x*+) forms accept the same set of names for a yes/no match.
    if (!eat('?')) eat('+');
    int lo2 = 0, hi2 = 0;
    size_t before = pos_;
    if (quantifier(lo2, hi2)) {
      pos_ = before;
      fail("multiple repeat");
    }
    auto rep = make(Node::Kind::Repeat);
    rep->min = lo;
    rep->max = hi;
    rep->children.push_back(std::move(node));
    return rep;
  }

  NodePtr group(int depth) {
    // pos_ is just past '('.
    if (eat('?')) {
      if (eat(':')) {
      } else if (eat('P')) {
        if (!eat('<')) fail("unsupported (?P form (named backreference)");
        size_t end = p_.find('>', pos_);
        if (end == std::string_view::npos || end == pos_) fail("bad group name");
        pos_ = end + 1;
      } else if (eat('#')) {
        size_t end = p_.find(')', pos_);
        if (end == std::string_view::npos) fail("missing ), unterminated comment");
        pos_ = end + 1;
        return make(Node::Kind::Empty);
      } else {
        fail("unsupported group syntax (lookaround, inline flags and conditionals are not supported)");
      }
    }
    NodePtr inner = alternation(depth + 1);
    if (!eat(')')) fail("missing ), unterminated subpattern");
    return inner;
  }

  // An escape after '\' that stands for one byte; -1 when it is not a single-byte escape.
  int byte_escape(char c) {
    switch (c) {
      case 't':
        return '\t';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'a':
        return '\a';
      case '0':
        return 0;
      case 'x': {
        if (pos_ + 2 > p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[pos_])) ||
            !std::isxdigit(static_cast<unsigned char>(p_[pos_ + 1])))
          fail("incomplete escape \\x");
        int v = std::stoi(std::string(p_.substr(pos_, 2)), nullptr, 16);
        pos_ += 2;
        return v;
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) return -1;
        return static_cast<unsigned char>(c);  // escaped punctuation is itself
    }
  }

  // \d \D \w \W \s \S; false for any other letter.
  static bool class_escape(char c, ByteSet& s) {
    switch (c) {
      case 'd':
        s = digits();
        return true;
      case 'D':
        s = ~digits();
        return true;
      case 'w':
        s = word();
        return true;
      case 'W':
        s = ~word();
        return true;
      case 's':
        s = spaces();
        return true;
      case 'S':
        s = ~spaces();
        return true;
      default:
        return false;
    }
  }

  NodePtr escape() {
    if (done()) fail("bad escape (end of pattern)");
    char c = p_[pos_++];
    ByteSet s;
    if (class_escape(c, s)) return set_node(s);
    switch (c) {
      case 'A':
        return assert_node(ModuleRegex::Op::Begin);
      case 'Z':
        return assert_node(ModuleRegex::Op::End);
      case 'b':
        return assert_node(ModuleRegex::Op::WordBoundary);
      case 'B':
        return assert_node(ModuleRegex::Op::NotWordBoundary);
      default:
        break;
    }
    if (c >= '1' && c <= '9') fail("backreferences are not supported");
    int b = byte_escape(c);
    if (b < 0) fail(std::string("bad escape \\") + c);
    s.set(static_cast<size_t>(b));
    return set_node(s);
  }

  // One class member that is a single byte, for range ends; -1 for a class escape (stored into `cls`).
  int class_item(ByteSet& cls) {
    char c = p_[pos_++];
    if (c != '\\') return static_cast<unsigned char>(c);
    if (done()) fail("bad escape (end of pattern)");
    char e = p_[pos_++];
    if (class_escape(e, cls)) return -1;
    if (e == 'b') return '\b';
    int b = byte_escape(e);
    if (b < 0) fail(std::string("bad escape \\") + e);
    return b;
  }

  NodePtr char_class() {
    // pos_ is just past '['.
    bool negate = eat('^');
    ByteSet s;
    bool first = true;
    while (true) {
      if (done()) fail("unterminated character set");
      if (peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      ByteSet cls;
      int lo = class_item(cls);
      if (lo < 0) {
        s |= cls;
        continue;
      }
      if (pos_ + 1 < p_.size() && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        ByteSet ignored;
        int hi = class_item(ignored);
        if (hi < 0 || hi < lo) fail("bad character range");
        s |= range(static_cast<unsigned char>(lo), static_cast<unsigned char>(hi));
      } else {
        s.set(static_cast<size_t>(lo));
      }
    }
    return set_node(negate ? ~s : s);
  }

  NodePtr atom(int depth) {
    char c = p_[pos_++];
    switch (c) {
      case '(':
        return group(depth);
      case '[':
        return char_class();
      case '\\':
        return escape();
      case '.': {
        ByteSet s;
        s.set();
        s.reset('\n');
        return set_node(s);
      }
      case '^':
        return assert_node(ModuleRegex::Op::Begin);
      case '$':
        return assert_node(ModuleRegex::Op::EndOrNewline);
      case '*':
      case '+':
      case '?':
        --pos_;
        fail("nothing to repeat");
      case '{': {
        int lo = 0, hi = 0;
        --pos_;
        size_t before = pos_;
        if (counted(lo, hi)) {
          pos_ = before;
          fail("nothing to repeat");
        }
        ++pos_;
        break;
      }
      default:
        break;
    }
    ByteSet s;
    s.set(static_cast<unsigned char>(c));
    return set_node(s);
  }

  uint32_t here() const { return static_cast<uint32_t>(out_.program_.size()); }
  void push(ModuleRegex::Inst inst) {
    if (out_.program_.size() >= ModuleRegex::kMaxProgram)
      throw ModuleRegexError("pattern too large: more than " + std::to_string(ModuleRegex::kMaxProgram) +
                             " NFA states once its repeats are expanded");
    out_.program_.push_back(inst);
  }

  void emit(const Node& n) {
    using Op = ModuleRegex::Op;
    switch (n.kind) {
      case Node::Kind::Empty:
        return;
      case Node::Kind::Set:
        push({Op::Set, n.set, 0});
        return;
      case Node::Kind::Assert:
        push({n.assertion, 0, 0});
        return;
      case Node::Kind::Concat:
        for (const auto& c : n.children) emit(*c);
        return;
      case Node::Kind::Alternate: {
        // split L1, next; L1: a; jump end; next: split L2, next2; ... last alternative falls through.
        std::vector<uint32_t> jumps;
        for (size_t i = 0; i < n.children.size(); ++i) {
          if (i + 1 == n.children.size()) {
            emit(*n.children[i]);
            break;
          }
          uint32_t split = here();
          push({Op::Split, split + 1, 0});
          emit(*n.children[i]);
          jumps.push_back(here());
          push({Op::Jump, 0, 0});
          out_.program_[split].b = here();
        }
        for (uint32_t j : jumps) out_.program_[j].a = here();
        return;
      }
      case Node::Kind::Repeat: {
        const Node& body = *n.children.front();
        for (int i = 0; i < n.min; ++i) emit(body);
        if (n.max == kUnbounded) {
          uint32_t loop = here();
          push({Op::Split, loop + 1, 0});
          emit(body);
          push({Op::Jump, loop, 0});
          out_.program_[loop].b = here();
          return;
        }
        // Each optional copy may be skipped straight to the end.
        std::vector<uint32_t> splits;
        for (int i = n.min; i < n.max; ++i) {
          splits.push_back(here());
          push({Op::Split, here() + 1, 0});
          emit(body);
        }
        for (uint32_t s : splits) out_.program_[s].b = here();
        return;
      }
    }
  }

  std::string_view p_;
  size_t pos_ = 0;
  std::vector<ByteSet> sets_;
  ModuleRegex out_;
};

ModuleRegex ModuleRegex::compile(std::string_view pattern) {
  return ModuleRegexCompiler(pattern).run();
}

bool ModuleRegex::match_prefix(std::string_view s) const {
  // Pike VM without captures: the set of live NFA states advances one byte at a time; each state is entered
  // at most once per position, so the work is O(|program| × |s|).
  const size_t n = program_.size();
  std::vector<uint32_t> current, next, stack;
  std::vector<size_t> seen(n, 0);  // seen[pc] == position + 1 when pc was already added there
  current.reserve(n), next.reserve(n), stack.reserve(n);

  // Follows the empty transitions from `start` at position `at`; returns true on reaching Match.
  auto add = [&](std::vector<uint32_t>& list, uint32_t start, size_t at) {
    stack.assign(1, start);
    while (!stack.empty()) {
      uint32_t pc = stack.back();
      stack.pop_back();
      if (seen[pc] == at + 1) continue;
      seen[pc] = at + 1;
      const Inst& in = program_[pc];
      auto word_before = [&] { return at > 0 && is_word_byte(static_cast<unsigned char>(s[at - 1])); };
      auto word_after = [&] { return at < s.size() && is_word_byte(static_cast<unsigned char>(s[at])); };
      switch (in.op) {
        case Op::Match:
          return true;
        case Op::Set:
          list.push_back(pc);
          break;
        case Op::Jump:
          stack.push_back(in.a);
          break;
        case Op::Split:
          stack.push_back(in.b);
          stack.push_back(in.a);
          break;
        case Op::Begin:
          if (at == 0) stack.push_back(pc + 1);
          break;
        case Op::End:
          if (at == s.size()) stack.push_back(pc + 1);
          break;
        case Op::EndOrNewline:
          if (at == s.size() || (at + 1 == s.size() && s[at] == '\n')) stack.push_back(pc + 1);
          break;
        case Op::WordBoundary:
          if (word_before() != word_after()) stack.push_back(pc + 1);
          break;
        case Op::NotWordBoundary:
          if (word_before() == word_after()) stack.push_back(pc + 1);
          break;
      }
    }
    return false;
  };

  if (add(current, 0, 0)) return true;
  for (size_t at = 0; at < s.size() && !current.empty(); ++at) {
    next.clear();
    const auto byte = static_cast<unsigned char>(s[at]);
    for (uint32_t pc : current)
      if (sets_[program_[pc].a].test(byte) && add(next, pc + 1, at + 1)) return true;
    current.swap(next);
  }
  return false;
}

}  // namespace bloomery
