#include "server/grammar.h"

#include <algorithm>
#include <cctype>
#include <cmath>
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
            std::sort(e.ranges.begin(), e.ranges.end());
            std::vector<std::pair<uint32_t, uint32_t>> merged;
            for (auto r : e.ranges) {
              if (!merged.empty() && uint64_t{r.first} <= uint64_t{merged.back().second} + 1)
                merged.back().second = std::max(merged.back().second, r.second);
              else
                merged.push_back(r);
            }
            e.ranges = std::move(merged);
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

// Whether sorted, merged ranges cover all of [lo, hi].
static bool covered(const std::vector<std::pair<uint32_t, uint32_t>>& r, uint32_t lo, uint32_t hi) {
  for (auto [a, b] : r) {
    if (b < lo) continue;
    return a <= lo && b >= hi;  // merged: the first range reaching lo must hold all of it
  }
  return false;
}

// Could the element take some character in [lo, hi]? (A partial UTF-8 character narrows it to a range.)
bool Grammar::range_possible(const Elem& e, uint32_t lo, uint32_t hi) const {
  if (!e.negated) {
    for (auto [a, b] : e.ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  return !covered(e.ranges, lo, hi);  // negated: possible unless the excluded ranges cover it
}

// Does the element take every character in [lo, hi]?
bool Grammar::range_all(const Elem& e, uint32_t lo, uint32_t hi) const {
  if (!e.negated) return covered(e.ranges, lo, hi);
  for (auto [a, b] : e.ranges)
    if (a <= hi && b >= lo) return false;
  return true;
}

// Reads one character: `cp`, or (any) a character every stack top is known to take.
bool Grammar::advance_cp(State& s, uint32_t cp, bool any) const {
  std::vector<Stack> next;
  for (const Stack& st : s.stacks) {
    if (st.empty()) continue;
    const Elem& e = elems_[st.back()];
    if (!any && !char_ok(e, cp)) continue;
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
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (s.partial_left == 0) {
    int n = utf8_len(b);
    if (n == 0) return false;
    if (n == 1) return advance_cp(s, b, false);
    s.partial = b & (0x7Fu >> n);
    s.partial_left = n - 1;
    s.partial_len = 1;
  } else {
    if ((b & 0xC0) != 0x80) return false;
    if (s.any_tail) {  // the rest of the character cannot change the outcome: only its length counts
      if (--s.partial_left > 0) return true;
      s.any_tail = false;
      return advance_cp(s, 0, true);
    }
    s.partial = (s.partial << 6) | (b & 0x3F);
    s.partial_left--;
    s.partial_len++;
    if (s.partial_left == 0) {
      uint32_t cp = s.partial;
      bool overlong = cp < min_cp[s.partial_len];
      s.partial = 0;
      s.partial_len = 0;
      if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      return advance_cp(s, cp, false);
    }
  }
  // Mid-character: some element must take a valid character that starts with these bytes: the shortest form
  // only (no overlong encodings), at most U+10FFFF, no surrogate. The range of such characters is [lo, hi]
  // less the surrogates, so up to two pieces.
  const uint32_t raw_lo = s.partial << (6 * s.partial_left);
  const uint32_t raw_hi = raw_lo | ((1u << (6 * s.partial_left)) - 1);
  const uint32_t lo = std::max(raw_lo, min_cp[s.partial_len + s.partial_left]);
  const uint32_t hi = std::min<uint32_t>(raw_hi, 0x10FFFF);
  std::pair<uint32_t, uint32_t> pieces[2];
  int n_pieces = 0;
  if (lo <= std::min<uint32_t>(hi, 0xD7FF)) pieces[n_pieces++] = {lo, std::min<uint32_t>(hi, 0xD7FF)};
  if (std::max<uint32_t>(lo, 0xE000) <= hi) pieces[n_pieces++] = {std::max<uint32_t>(lo, 0xE000), hi};
  if (n_pieces == 0) return false;
  // Stacks that cannot take any character in the range are dropped now (they could not survive it), and when
  // every remaining one takes all of it and every completion is a valid character, the prefix's exact bits
  // no longer matter: the state forgets them, so the many lead bytes of, say, CJK text inside a JSON string
  // are one state, not one per prefix (the mask's automaton stays small).
  std::vector<Stack> keep;
  bool all = true;
  for (Stack& st : s.stacks) {
    if (st.empty()) continue;
    const Elem& e = elems_[st.back()];
    bool possible = false;
    for (int k = 0; k < n_pieces; ++k)
      possible = possible || range_possible(e, pieces[k].first, pieces[k].second);
    if (!possible) continue;
    all = all && range_all(e, lo, hi);
    keep.push_back(std::move(st));
  }
  if (keep.empty()) return false;
  s.stacks = std::move(keep);
  const bool valid_all = lo == raw_lo && hi == raw_hi && (hi < 0xD800 || lo > 0xDFFF);
  if (all && valid_all) {
    s.any_tail = true;
    s.partial = 0;
    s.partial_len = 0;
  }
  return true;
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
  // Sorted by bytes, tokens sharing a prefix are neighbours: each token adds the nodes past its common prefix
  // with the one before, and a node's subtree ends where a later token leaves its prefix.
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes.size(); ++id)
    if (is_text[id] && !token_bytes[id].empty()) order.push_back(static_cast<int32_t>(id));
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)];
  });
  byte.push_back(0);
  depth.push_back(0);
  next.push_back(0);
  tok_off.push_back(0);
  std::vector<uint32_t> path = {0};  // path[d]: the node at depth d of the previous token
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& t = token_bytes[static_cast<size_t>(id)];
    if (t.size() > 65535) throw GrammarError("grammar: a vocabulary token longer than 65535 bytes");
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < t.size() && (*prev)[common] == t[common]) ++common;
    while (path.size() > common + 1) {
      next[path.back()] = static_cast<uint32_t>(byte.size());
      path.pop_back();
    }
    for (size_t d = common; d < t.size(); ++d) {
      path.push_back(static_cast<uint32_t>(byte.size()));
      byte.push_back(static_cast<uint8_t>(t[d]));
      depth.push_back(static_cast<uint16_t>(d + 1));
      next.push_back(0);
      tok_off.push_back(static_cast<uint32_t>(tok.size()));
    }
    tok.push_back(id);  // at the node of depth t.size(), the last one created (or a duplicate's)
    max_depth = std::max(max_depth, t.size());
    prev = &t;
  }
  for (uint32_t n : path) next[n] = static_cast<uint32_t>(byte.size());
  tok_off.push_back(static_cast<uint32_t>(tok.size()));
}

size_t TokenMasker::StateHash::operator()(const Grammar::State& s) const {
  uint64_t h = 1469598103934665603ull ^ (s.partial * 31u + static_cast<uint32_t>(s.partial_left) * 7u +
                                         s.partial_len * 3u + s.any_tail);
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const auto& st : s.stacks) {
    mix(st.size() | 0x80000000ull);
    for (uint32_t e : st) mix(e);
  }
  return static_cast<size_t>(h);
}

// Bounds on what one masker keeps: transitions cost 1 KiB per automaton state, a mask vocab/8 bytes.
static constexpr size_t kMaxStates = 16384;
static constexpr size_t kMasks = 128;

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie)
    : g_(std::move(g)), trie_(std::move(trie)) {}

void TokenMasker::reset() {
  ids_.clear();
  states_.clear();
  trans_.clear();
  mask_of_.clear();
  masks_.clear();
  victim_ = 0;
}

int32_t TokenMasker::intern(Grammar::State s) {
  auto [it, fresh] = ids_.try_emplace(std::move(s), static_cast<int32_t>(states_.size()));
  if (fresh) {
    states_.push_back(&it->first);
    trans_.emplace_back();
    trans_.back().fill(kUnknown);
    mask_of_.push_back(-1);
  }
  return it->second;
}

int32_t TokenMasker::transition(int32_t from, uint8_t b) {
  int32_t to = trans_[static_cast<size_t>(from)][b];
  if (to != kUnknown) return to;
  Grammar::State t = *states_[static_cast<size_t>(from)];
  to = g_->advance(t, b) ? intern(std::move(t)) : kReject;  // intern may grow trans_: index again
  trans_[static_cast<size_t>(from)][b] = to;
  return to;
}

// One scan of the preorder trie: a node's state is its parent's (the state at depth − 1 on the current path)
// after its byte; a rejected node skips its subtree, since every token below starts with the same bytes.
void TokenMasker::walk(int32_t root, TokenMask& out) {
  const VocabTrie& t = *trie_;
  at_.assign(t.max_depth + 1, kReject);
  at_[0] = root;
  const uint32_t n = static_cast<uint32_t>(t.size());
  const uint8_t* byte = t.byte.data();
  const uint16_t* depth = t.depth.data();
  const uint32_t* next = t.next.data();
  const uint32_t* off = t.tok_off.data();
  const int32_t* tok = t.tok.data();
  int32_t* at = at_.data();
  const int32_t* trans = trans_.front().data();  // [state][byte], re-read when a transition is added
  for (uint32_t i = 1; i < n;) {
    const uint16_t d = depth[i];
    const int32_t from = at[d - 1u];
    int32_t to = trans[static_cast<size_t>(from) * 256 + byte[i]];
    if (to == kUnknown) {
      to = transition(from, byte[i]);
      trans = trans_.front().data();
    }
    if (to < 0) {
      i = next[i];
      continue;
    }
    at[d] = to;
    for (uint32_t k = off[i]; k < off[i + 1]; ++k) out.set(static_cast<size_t>(tok[k]));
    ++i;
  }
}

const TokenMask& TokenMasker::mask(const Grammar::State& s) {
  if (states_.size() > kMaxStates) reset();  // between walks only: a walk holds state ids
  const int32_t id = intern(s);
  if (int32_t m = mask_of_[static_cast<size_t>(id)]; m >= 0) {
    hits_++;
    return masks_[static_cast<size_t>(m)].mask;
  }
  misses_++;
  size_t slot = masks_.size();
  if (slot < kMasks) {
    masks_.push_back({});
  } else {
    slot = victim_;
    victim_ = (victim_ + 1) % kMasks;
    mask_of_[static_cast<size_t>(masks_[slot].state)] = -1;
  }
  masks_[slot].state = id;
  masks_[slot].mask = TokenMask(trie_->vocab);
  walk(id, masks_[slot].mask);
  mask_of_[static_cast<size_t>(id)] = static_cast<int32_t>(slot);
  return masks_[slot].mask;
}

void apply_mask(const TokenMask& ok, bool accepting, std::span<const int32_t> eos_ids,
                std::vector<float>& logits) {
  // EOS keeps its own logit where it is allowed (not a fixed value that would reweigh it against the text).
  std::vector<std::pair<size_t, float>> eos;
  for (int32_t e : eos_ids)
    if (e >= 0 && static_cast<size_t>(e) < logits.size())
      eos.push_back({static_cast<size_t>(e), logits[static_cast<size_t>(e)]});
  bool any = false;
  // A word at a time: a JSON string's mask is nearly all ones, a literal's nearly all zeros. Bits past the
  // vocabulary are never set, so padded ids are refused with the rest.
  const std::vector<uint64_t>& words = ok.words();
  const size_t n = logits.size();
  float* out = logits.data();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = w < words.size() ? words[w] : 0;
    const size_t begin = w * 64, end = std::min(n, begin + 64);
    any = any || bits != 0;
    if (bits == ~uint64_t{0}) continue;
    if (bits == 0) {
      std::fill(out + begin, out + end, -INFINITY);
      continue;
    }
    for (size_t i = begin; i < end; ++i)
      if (!((bits >> (i - begin)) & 1u)) out[i] = -INFINITY;
  }
  if (accepting || !any)
    for (auto [e, v] : eos) logits[e] = std::isfinite(v) || any ? v : 0.0f;  // a dead end must still end
}

}  // namespace bloomery::server
