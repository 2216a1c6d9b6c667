// Constrained decoding: a GBNF grammar (llama.cpp's grammar syntax) compiled into flattened rules, and a
// matcher that walks a set of pushdown stacks over bytes. Bytes, not characters: a byte-level BPE token can
// end inside a UTF-8 character or cross from one grammar element into the next, so the state keeps a
// partial character and checks that some element can still take a character with those leading bytes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace bloomery::server {

// A grammar that does not compile: the message names the construct (rule, position, what was expected).
class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Grammar {
 public:
  // One pushdown stack: element positions still to match, innermost last. Empty = the root is complete.
  using Stack = std::vector<uint32_t>;
  struct State {
    std::vector<Stack> stacks;  // sorted, unique; each top is a character element (or the stack is empty)
    uint32_t partial = 0;       // a UTF-8 character being read: its bits so far
    int partial_left = 0;       // continuation bytes it still needs
    uint8_t partial_len = 0;    // bytes read of it
    bool any_tail = false;      // every completion of it is taken by every stack: its bits were dropped
    bool operator==(const State& o) const {
      return stacks == o.stacks && partial == o.partial && partial_left == o.partial_left &&
             partial_len == o.partial_len && any_tail == o.any_tail;
    }
  };

  // Throws GrammarError (undefined rule, left recursion, syntax, no `root`).
  static std::shared_ptr<const Grammar> parse(const std::string& gbnf, const std::string& root = "root");

  State initial() const { return initial_; }
  // Feeds one byte; false (state unchanged meaning lost) when the grammar cannot take it.
  bool advance(State& s, uint8_t byte) const;
  bool advance(State& s, const std::string& bytes) const;
  // Feeds one whole character (a state between characters only): the byte path's reference in tests.
  bool advance_char(State& s, uint32_t cp) const { return s.partial_left == 0 && advance_cp(s, cp, false); }
  // The text so far is a complete sentence (EOS may follow).
  bool accepting(const State& s) const;
  // Complete and nothing else may follow: only EOS is left.
  bool finished(const State& s) const;
  // The whole string matches.
  bool matches(const std::string& text) const;
  size_t n_rules() const { return rule_alts_.size(); }

 private:
  enum class Type : uint8_t { End, Chars, Ref };
  struct Elem {
    Type type = Type::End;
    bool negated = false;
    uint32_t rule = 0;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges, sorted and merged
  };
  friend class GrammarBuilder;
  bool char_ok(const Elem& e, uint32_t cp) const;
  bool range_possible(const Elem& e, uint32_t lo, uint32_t hi) const;
  bool range_all(const Elem& e, uint32_t lo, uint32_t hi) const;
  void expand(Stack stack, std::vector<Stack>& out, int depth) const;
  bool advance_cp(State& s, uint32_t cp, bool any) const;

  std::vector<Elem> elems_;
  std::vector<std::vector<uint32_t>> rule_alts_;  // per rule: start positions of its alternatives
  std::vector<std::string> rule_names_;
  State initial_;
};

// Every text token's bytes in a byte trie, built once per tokenizer and shared by all maskers. Flat and in
// preorder (llguidance's layout): node i's subtree is i … next[i] − 1, so a walk is one forward scan that
// jumps over the whole subtree of a rejected prefix, and a prefix shared by many tokens is matched once.
struct VocabTrie {
  // token_bytes[id]: the token's bytes; is_text[id] false for special tokens (never allowed by a grammar).
  VocabTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& is_text);
  size_t size() const { return byte.size(); }  // nodes, the root (0) included
  std::vector<uint8_t> byte;                   // the byte that leads into node i (root: 0)
  std::vector<uint16_t> depth;                 // bytes from the root to node i (root: 0)
  std::vector<uint32_t> next;                  // the first node after i's subtree
  std::vector<uint32_t> tok_off;               // node i's tokens: tok[tok_off[i] … tok_off[i + 1])
  std::vector<int32_t> tok;                    // token ids whose bytes end at the node
  size_t vocab = 0;
  size_t max_depth = 0;
};

// One bit per token id; bit set = the token keeps the text inside the grammar.
class TokenMask {
 public:
  TokenMask() = default;
  explicit TokenMask(size_t n) : words_((n + 63) / 64, 0), n_(n) {}
  size_t size() const { return n_; }
  bool operator[](size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1u; }
  void set(size_t i) { words_[i >> 6] |= uint64_t{1} << (i & 63); }
  const std::vector<uint64_t>& words() const { return words_; }
  bool operator==(const TokenMask& o) const = default;

 private:
  std::vector<uint64_t> words_;
  size_t n_ = 0;
};

// Masks the vocabulary for a grammar state. The matcher's states are interned into a byte automaton built
// lazily as walks need it (state id, byte) → state id, so a walk over the flat trie costs one table read per
// node, and a grammar state that a prefix returns to (inside a JSON string every ordinary character does)
// is computed once, not once per token. The automaton outlives the mask: a state first seen in a later step
// or request reuses every transition computed before. Masks are cached by state (most steps are hits).
// One per (grammar, tokenizer); not thread-safe (the scheduler thread is its only user).
class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie);
  TokenMasker(std::shared_ptr<const Grammar> g, const std::vector<std::string>& token_bytes,
              const std::vector<bool>& is_text)
      : TokenMasker(std::move(g), std::make_shared<VocabTrie>(token_bytes, is_text)) {}
  // Sized to the vocabulary. The reference stays valid until the next mask() call.
  const TokenMask& mask(const Grammar::State& s);
  const Grammar& grammar() const { return *g_; }
  uint64_t cache_hits() const { return hits_; }
  uint64_t cache_misses() const { return misses_; }
  size_t automaton_states() const { return states_.size(); }

 private:
  struct StateHash {
    size_t operator()(const Grammar::State& s) const;
  };
  static constexpr int32_t kUnknown = -2, kReject = -1;
  int32_t intern(Grammar::State s);
  int32_t transition(int32_t from, uint8_t b);
  void walk(int32_t root, TokenMask& out);
  void reset();

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const VocabTrie> trie_;
  std::unordered_map<Grammar::State, int32_t, StateHash> ids_;
  std::vector<const Grammar::State*> states_;    // by id (keys of ids_, which never move)
  std::vector<std::array<int32_t, 256>> trans_;  // by id: kUnknown, kReject or the next state
  std::vector<int32_t> mask_of_;                 // by id: index into masks_, or −1
  struct Cached {
    int32_t state = -1;
    TokenMask mask;
  };
  std::vector<Cached> masks_;  // at most kMasks, replaced round-robin
  size_t victim_ = 0;
  std::vector<int32_t> at_;  // walk scratch: the state at each trie depth
  uint64_t hits_ = 0, misses_ = 0;
};

// Applies a mask to one row of logits: rejected tokens get -inf; an EOS id keeps its logit once the grammar
// accepts, or when nothing else is left, so a dead end still ends; ids beyond the vocabulary (padded heads)
// are never allowed.
void apply_mask(const TokenMask& ok, bool accepting, std::span<const int32_t> eos_ids,
                std::vector<float>& logits);

}  // namespace bloomery::server
