#include "server/grammar.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

namespace bloomery::server {

namespace {

// The parser's tree before flattening: rules of alternatives of symbols.
struct Sym {
  bool is_ref = false;
  bool negated = false;
  std::string ref;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
};
using Seq = std::vector<Sym>;
struct RuleDef {
  std::string name;
  std::vector<Seq> alts;
};

class Parser {
 public:
  explicit Parser(const std::string& src) : s_(src) {}

  std::vector<RuleDef> parse() {
    skip(true);
    while (p_ < s_.size()) {
      size_t at = p_;
      std::string name = name_here();
      if (name.empty()) fail(at, "a rule name");
      skip(true);
      if (s_.compare(p_, 3, "::=") != 0) fail(p_, "'::=' after rule name '" + name + "'");
      p_ += 3;
      if (defined_.count(name)) fail(at, "rule '" + name + "' defined once (it is defined twice)");
      defined_.insert(name);
      size_t slot = rules_.size();
      rules_.push_back({name, {}});
      auto alts = alternatives(false);
      rules_[slot].alts = std::move(alts);
      skip(true);
    }
    return std::move(rules_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& expected) const {
    size_t line = 1 + static_cast<size_t>(std::count(
                          s_.begin(), s_.begin() + static_cast<long>(std::min(at, s_.size())), '\n'));
    std::string near = s_.substr(at, 20);
    std::replace(near.begin(), near.end(), '\n', ' ');
    throw GrammarError(fmt::format("grammar line {}: expected {} near '{}'", line, expected, near));
  }

  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  }
  // Skips spaces, comments and (when `newlines`) line breaks.
  void skip(bool newlines) {
    while (p_ < s_.size()) {
      char c = s_[p_];
      if (c == '#') {
        while (p_ < s_.size() && s_[p_] != '\n') ++p_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++p_;
      } else {
        break;
      }
    }
  }
  std::string name_here() {
    size_t b = p_;
    while (p_ < s_.size() && name_char(s_[p_])) ++p_;
    return s_.substr(b, p_ - b);
  }
  // The next thing is `name ::=`: the current rule ended.
  bool at_rule_start() {
    size_t save = p_;
    std::string n = name_here();
    skip(true);
    bool yes = !n.empty() && s_.compare(p_, 3, "::=") == 0;
    p_ = save;
    return yes;
  }

  std::vector<Seq> alternatives(bool nested) {
    std::vector<Seq> alts;
    alts.push_back(sequence(nested));
    while (true) {
      skip(true);
      if (p_ < s_.size() && s_[p_] == '|') {
        ++p_;
        alts.push_back(sequence(nested));
        continue;
      }
      break;
    }
    return alts;
  }

  uint32_t escape(size_t& q) {
    // s_[q] is the character after the backslash.
    if (q >= s_.size()) fail(q, "an escape");
    char c = s_[q++];
    auto hex = [&](int n) {
      uint32_t v = 0;
      for (int i = 0; i < n; ++i) {
        if (q >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[q]))) fail(q, "hex digits");
        char h = s_[q++];
        v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                               ? h - '0'
                                               : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    switch (c) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case '\\':
        return '\\';
      case '"':
        return '"';
      case '[':
        return '[';
      case ']':
        return ']';
      case '-':
        return '-';
      case '^':
        return '^';
      case '/':
        return '/';
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      default:
        fail(q - 1, "a known escape (\\n \\t \\r \\\\ \\\" \\xHH \\uHHHH)");
    }
  }
  // One UTF-8 character (or escape) of a literal or class.
  uint32_t char_at(size_t& q) {
    if (s_[q] == '\\') {
      ++q;
      return escape(q);
    }
    unsigned char c = static_cast<unsigned char>(s_[q]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || q + static_cast<size_t>(n) > s_.size()) fail(q, "valid UTF-8");
    uint32_t cp = n == 1 ? c : (c & (0x7F >> n));
    for (int i = 1; i < n; ++i)
      cp = (cp << 6) | (static_cast<unsigned char>(s_[q + static_cast<size_t>(i)]) & 0x3F);
    q += static_cast<size_t>(n);
    return cp;
  }

  std::string fresh(const std::string& base) { return fmt::format("{}__{}", base, counter_++); }

  // A new rule holding `seq`, referenced by name.
  Sym wrap(const std::string& base, std::vector<Seq> alts) {
    std::string n = fresh(base);
    rules_.push_back({n, std::move(alts)});
    Sym s;
    s.is_ref = true;
    s.ref = n;
    return s;
  }

  void repeat(Seq& seq, size_t last, uint64_t lo, uint64_t hi, bool unbounded) {
    if (last >= seq.size()) fail(p_, "something to repeat before the operator");
    Seq x(seq.begin() + static_cast<long>(last), seq.end());
    seq.resize(last);
    Sym item = x.size() == 1 ? x[0] : wrap("group", {x});
    for (uint64_t i = 0; i < lo; ++i) seq.push_back(item);
    if (unbounded) {
      std::string n = fresh("star");
      Sym self;
      self.is_ref = true;
      self.ref = n;
      rules_.push_back({n, {Seq{item, self}, Seq{}}});
      seq.push_back(self);
      return;
    }
    if (hi > lo) {
      // opt_k ::= item opt_{k-1} | ε, nested (hi - lo) deep.
      Sym tail;
      bool have_tail = false;
      for (uint64_t i = lo; i < hi; ++i) {
        Seq body{item};
        if (have_tail) body.push_back(tail);
        tail = wrap("opt", {body, Seq{}});
        have_tail = true;
      }
      seq.push_back(tail);
    }
  }

  Seq sequence(bool nested) {
    Seq seq;
    size_t last = SIZE_MAX;
    while (true) {
      skip(nested);
      if (p_ >= s_.size()) break;
      char c = s_[p_];
      if (c == '\n') {
        // A line break ends the rule unless the next line goes on with it (an alternative or more symbols
        // that are not a new `name ::=`).
        skip(true);
        if (p_ >= s_.size() || at_rule_start()) break;
        continue;
      }
      if (c == '|' || c == ')') break;
      if (c == '"') {
        ++p_;
        last = seq.size();
        while (true) {
          if (p_ >= s_.size()) fail(p_, "a closing '\"'");
          if (s_[p_] == '"') break;
          uint32_t cp = char_at(p_);
          Sym s;
          s.ranges = {{cp, cp}};
          seq.push_back(s);
        }
        ++p_;
        if (last == seq.size()) last = SIZE_MAX;  // "" matches nothing to repeat
      } else if (c == '[') {
        ++p_;
        Sym s;
        if (p_ < s_.size() && s_[p_] == '^') {
          s.negated = true;
          ++p_;
        }
        while (true) {
          if (p_ >= s_.size()) fail(p_, "a closing ']'");
          if (s_[p_] == ']') break;
          uint32_t a = char_at(p_);
          uint32_t b = a;
          if (p_ + 1 < s_.size() && s_[p_] == '-' && s_[p_ + 1] != ']') {
            ++p_;
            b = char_at(p_);
          }
          if (b < a) fail(p_, "a range low-high");
          s.ranges.push_back({a, b});
        }
        ++p_;
        last = seq.size();
        seq.push_back(s);
      } else if (c == '.') {
        ++p_;
        Sym s;
        s.negated = true;  // nothing excluded: any character
        last = seq.size();
        seq.push_back(s);
      } else if (c == '(') {
        ++p_;
        auto alts = alternatives(true);
        skip(true);
        if (p_ >= s_.size() || s_[p_] != ')') fail(p_, "')'");
        ++p_;
        last = seq.size();
        seq.push_back(wrap("paren", std::move(alts)));
      } else if (name_char(c)) {
        if (!nested && at_rule_start()) break;
        Sym s;
        s.is_ref = true;
        s.ref = name_here();
        last = seq.size();
        seq.push_back(s);
      } else if (c == '*' || c == '+' || c == '?') {
        ++p_;
        if (last == SIZE_MAX) fail(p_ - 1, "something to repeat before '" + std::string(1, c) + "'");
        if (c == '*') repeat(seq, last, 0, 0, true);
        if (c == '+') repeat(seq, last, 1, 0, true);
        if (c == '?') repeat(seq, last, 0, 1, false);
        last = SIZE_MAX;
      } else if (c == '{') {
        ++p_;
        if (last == SIZE_MAX) fail(p_ - 1, "something to repeat before '{'");
        auto number = [&]() {
          skip(false);
          size_t b = p_;
          while (p_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p_]))) ++p_;
          if (b == p_) return std::optional<uint64_t>();
          return std::optional<uint64_t>(std::stoull(s_.substr(b, p_ - b)));
        };
        auto lo = number();
        if (!lo) fail(p_, "a repetition count {m}, {m,} or {m,n}");
        skip(false);
        uint64_t hi = *lo;
        bool unbounded = false;
        if (p_ < s_.size() && s_[p_] == ',') {
          ++p_;
          auto h = number();
          if (h)
            hi = *h;
          else
            unbounded = true;
        }
        skip(false);
        if (p_ >= s_.size() || s_[p_] != '}') fail(p_, "'}'");
        ++p_;
        if (!unbounded && hi < *lo) fail(p_, "{m,n} with m <= n");
        if (hi > 10000 || *lo > 10000) fail(p_, "a repetition count of at most 10000");
        repeat(seq, last, *lo, hi, unbounded);
        last = SIZE_MAX;
      } else {
        fail(p_, "a symbol (\"literal\", [class], rule name, ( ), or an operator)");
      }
    }
    return seq;
  }

  const std::string& s_;
  size_t p_ = 0;
  int counter_ = 0;
  std::vector<RuleDef> rules_;
  std::set<std::string> defined_;
};

int utf8_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 6) return 2;
  if ((lead >> 4) == 14) return 3;
  if ((lead >> 3) == 30) return 4;
  return 0;
}

}  // namespace

class GrammarBuilder {
 public:
  static std::shared_ptr<const Grammar> build(std::vector<RuleDef> defs, const std::string& root) {
    auto g = std::shared_ptr<Grammar>(new Grammar());
    std::map<std::string, uint32_t> id;
    // The root first, so rule 0 is where matching starts.
    auto root_it = std::find_if(defs.begin(), defs.end(), [&](const RuleDef& r) { return r.name == root; });
    if (root_it == defs.end()) throw GrammarError("grammar: no '" + root + "' rule (matching starts there)");
    std::rotate(defs.begin(), root_it, root_it + 1);
    for (const auto& r : defs) id[r.name] = static_cast<uint32_t>(id.size());
    g->rule_alts_.resize(defs.size());
    for (const auto& r : defs) g->rule_names_.push_back(r.name);
    for (size_t ri = 0; ri < defs.size(); ++ri) {
      for (const auto& alt : defs[ri].alts) {
        g->rule_alts_[ri].push_back(static_cast<uint32_t>(g->elems_.size()));
        for (const auto& s : alt) {
          Grammar::Elem e;
          if (s.is_ref) {
            auto it = id.find(s.ref);
            if (it == id.end())
              throw GrammarError("grammar: rule '" + defs[ri].name + "' refers to undefined rule '" + s.ref +
                                 "'");
            e.type = Grammar::Type::Ref;
            e.rule = it->second;
          } else {
            e.type = Grammar::Type::Chars;
            e.negated = s.negated;
            e.ranges = s.ranges;
          }
          g->elems_.push_back(std::move(e));
        }
        g->elems_.push_back(Grammar::Elem{});  // End
      }
    }
    check_left_recursion(*g);
    std::vector<Grammar::Stack> init;
    for (uint32_t a : g->rule_alts_[0]) {
      Grammar::Stack s;
      if (g->elems_[a].type != Grammar::Type::End) s.push_back(a);
      g->expand(s, init, 0);
    }
    std::sort(init.begin(), init.end());
    init.erase(std::unique(init.begin(), init.end()), init.end());
    g->initial_.stacks = std::move(init);
    return g;
  }

 private:
  // A rule that can reach itself without reading a character would loop forever in expansion.
  static void check_left_recursion(const Grammar& g) {
    size_t n = g.rule_alts_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (uint32_t a : g.rule_alts_[r]) {
          bool all = true;
          for (uint32_t p = a; g.elems_[p].type != Grammar::Type::End; ++p)
            if (g.elems_[p].type == Grammar::Type::Chars || !nullable[g.elems_[p].rule]) {
              all = false;
              break;
            }
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // first[r]: rules reachable at r's start (through nullable prefixes).
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (uint32_t a : g.rule_alts_[r])
        for (uint32_t p = a; g.elems_[p].type == Grammar::Type::Ref; ++p) {
          first[r].push_back(g.elems_[p].rule);
          if (!nullable[g.elems_[p].rule]) break;
        }
    std::vector<int> color(n, 0);
    std::function<void(uint32_t)> dfs = [&](uint32_t r) {
      color[r] = 1;
      for (uint32_t q : first[r]) {
        if (color[q] == 1)
          throw GrammarError("grammar: rule '" + g.rule_names_[q] +
                             "' is left-recursive (it can reach itself before reading a character)");
        if (color[q] == 0) dfs(q);
      }
      color[r] = 2;
    };
    for (uint32_t r = 0; r < n; ++r)
      if (color[r] == 0) dfs(r);
  }
};

std::shared_ptr<const Grammar> Grammar::parse(const std::string& gbnf, const std::string& root) {
  Parser p(gbnf);
  return GrammarBuilder::build(p.parse(), root);
}

void Grammar::expand(Stack stack, std::vector<Stack>& out, int depth) const {
  if (depth > 4096) throw GrammarError("grammar: expansion deeper than 4096 rules");
  if (stack.empty()) {
    out.push_back(std::move(stack));
    return;
  }
  uint32_t pos = stack.back();
  const Elem& e = elems_[pos];
  if (e.type == Type::Chars) {
    out.push_back(std::move(stack));
    return;
  }
  // A rule reference: its continuation stays below, each alternative goes on top.
  stack.pop_back();
  if (elems_[pos + 1].type != Type::End) stack.push_back(pos + 1);
  for (uint32_t a : rule_alts_[e.rule]) {
    Stack s = stack;
    if (elems_[a].type != Type::End) s.push_back(a);
    expand(std::move(s), out, depth + 1);
  }
}

bool Grammar::char_ok(const Elem& e, uint32_t cp) const {
  bool in = false;
  for (auto [lo, hi] : e.ranges)
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  return in != e.negated;
}

// Could the element take some character in [lo, hi]? (A partial UTF-8 character narrows it to a range.)
bool Grammar::range_possible(const Elem& e, uint32_t lo, uint32_t hi) const {
  if (!e.negated) {
    for (auto [a, b] : e.ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Negated: possible unless the excluded ranges cover all of [lo, hi].
  uint32_t next = lo;
  std::vector<std::pair<uint32_t, uint32_t>> r = e.ranges;
  std::sort(r.begin(), r.end());
  for (auto [a, b] : r) {
    if (a > next) break;
    if (b >= next) {
      if (b >= hi) return false;
      next = b + 1;
    }
  }
  return next <= hi;
}

bool Grammar::advance_cp(State& s, uint32_t cp) const {
  std::vector<Stack> next;
  for (const Stack& st : s.stacks) {
    if (st.empty()) continue;
    const Elem& e = elems_[st.back()];
    if (!char_ok(e, cp)) continue;
    Stack n = st;
    n.back() += 1;
    if (elems_[n.back()].type == Type::End) n.pop_back();
    expand(std::move(n), next, 0);
  }
  if (next.empty()) return false;
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  s.stacks = std::move(next);
  return true;
}

bool Grammar::advance(State& s, uint8_t b) const {
  if (s.partial_left == 0) {
    int n = utf8_len(b);
    if (n == 0) return false;
    if (n == 1) return advance_cp(s, b);
    s.partial = b & (0x7Fu >> n);
    s.partial_left = n - 1;
    s.partial_len = 1;
  } else {
    if ((b & 0xC0) != 0x80) return false;
    s.partial = (s.partial << 6) | (b & 0x3F);
    s.partial_left--;
    s.partial_len++;
    if (s.partial_left == 0) {
      static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
      uint32_t cp = s.partial;
      bool overlong = cp < min_cp[s.partial_len];
      s.partial = 0;
      s.partial_len = 0;
      if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      return advance_cp(s, cp);
    }
  }
  // Mid-character: some element must take a character that starts with these bytes. The shortest form only
  // (no overlong encodings), at most U+10FFFF.
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  uint32_t lo = s.partial << (6 * s.partial_left);
  uint32_t hi = std::min<uint32_t>(lo | ((1u << (6 * s.partial_left)) - 1), 0x10FFFF);
  lo = std::max(lo, min_cp[s.partial_len + s.partial_left]);
  if (lo > hi) return false;
  for (const Stack& st : s.stacks)
    if (!st.empty() && range_possible(elems_[st.back()], lo, hi)) return true;
  return false;
}

bool Grammar::advance(State& s, const std::string& bytes) const {
  for (unsigned char c : bytes)
    if (!advance(s, c)) return false;
  return true;
}

bool Grammar::accepting(const State& s) const {
  if (s.partial_left) return false;
  for (const Stack& st : s.stacks)
    if (st.empty()) return true;
  return false;
}

bool Grammar::finished(const State& s) const {
  return accepting(s) && s.stacks.size() == 1;
}

bool Grammar::matches(const std::string& text) const {
  State s = initial_;
  return advance(s, text) && accepting(s);
}

// --- TokenMasker

VocabTrie::VocabTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& is_text)
    : vocab(token_bytes.size()) {
  nodes.emplace_back();
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (!is_text[id] || token_bytes[id].empty()) continue;
    uint32_t node = 0;
    for (unsigned char c : token_bytes[id]) {
      auto& kids = nodes[node].kids;
      auto it = std::find_if(kids.begin(), kids.end(), [c](const auto& k) { return k.first == c; });
      if (it != kids.end()) {
        node = it->second;
      } else {
        uint32_t nn = static_cast<uint32_t>(nodes.size());
        nodes[node].kids.push_back({c, nn});
        nodes.emplace_back();
        node = nn;
      }
    }
    nodes[node].tokens.push_back(static_cast<int32_t>(id));
  }
}

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie)
    : g_(std::move(g)), trie_(std::move(trie)) {}

void TokenMasker::walk(uint32_t node, const Grammar::State& s, std::vector<uint8_t>& out) const {
  const auto& nodes = trie_->nodes;
  for (const auto& [b, kid] : nodes[node].kids) {
    Grammar::State t = s;
    if (!g_->advance(t, b)) continue;  // every token below shares this rejected prefix
    for (int32_t id : nodes[kid].tokens) out[static_cast<size_t>(id)] = 1;
    if (!nodes[kid].kids.empty()) walk(kid, t, out);
  }
}

const std::vector<uint8_t>& TokenMasker::mask(const Grammar::State& s) {
  for (size_t i = cache_.size(); i-- > 0;) {
    if (cache_[i].state == s) {
      hits_++;
      if (i + 1 != cache_.size()) {
        Entry e = std::move(cache_[i]);
        cache_.erase(cache_.begin() + static_cast<long>(i));
        cache_.push_back(std::move(e));
      }
      return cache_.back().mask;
    }
  }
  misses_++;
  Entry e{s, std::vector<uint8_t>(trie_->vocab, 0)};
  walk(0, s, e.mask);
  if (cache_.size() >= 64) cache_.erase(cache_.begin());
  cache_.push_back(std::move(e));
  return cache_.back().mask;
}

}  // namespace bloomery::server
