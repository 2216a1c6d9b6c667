// Constrained decoding: a GBNF grammar (llama.cpp's grammar syntax) compiled into flattened rules, and a
// matcher that walks a set of pushdown stacks over bytes. Bytes, not characters: a byte-level BPE token can
// end inside a UTF-8 character or cross from one grammar element into the next, so the state keeps a
// partial character and checks that some element can still take a character with those leading bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
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
    bool operator==(const State& o) const {
      return stacks == o.stacks && partial == o.partial && partial_left == o.partial_left &&
             partial_len == o.partial_len;
    }
  };

  // Throws GrammarError (undefined rule, left recursion, syntax, no `root`).
  static std::shared_ptr<const Grammar> parse(const std::string& gbnf, const std::string& root = "root");

  State initial() const { return initial_; }
  // Feeds one byte; false (state unchanged meaning lost) when the grammar cannot take it.
  bool advance(State& s, uint8_t byte) const;
  bool advance(State& s, const std::string& bytes) const;
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
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
  };
  friend class GrammarBuilder;
  bool char_ok(const Elem& e, uint32_t cp) const;
  bool range_possible(const Elem& e, uint32_t lo, uint32_t hi) const;
  void expand(Stack stack, std::vector<Stack>& out, int depth) const;
  bool advance_cp(State& s, uint32_t cp) const;

  std::vector<Elem> elems_;
  std::vector<std::vector<uint32_t>> rule_alts_;  // per rule: start positions of its alternatives
  std::vector<std::string> rule_names_;
  State initial_;
};

// Masks the vocabulary for a grammar state: a byte trie over every token's bytes is walked with the state,
// dropping whole subtrees the grammar rejects; masks are cached by state (a JSON string or a repeated
// element returns to the same state, so most steps are cache hits). One per (grammar, tokenizer).
// Every text token's bytes in a byte trie, built once per tokenizer and shared by all maskers.
struct VocabTrie {
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> kids;
    std::vector<int32_t> tokens;  // tokens whose bytes end here
  };
  // token_bytes[id]: the token's bytes; is_text[id] false for special tokens (never allowed by a grammar).
  VocabTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& is_text);
  std::vector<Node> nodes;
  size_t vocab = 0;
};

class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie);
  TokenMasker(std::shared_ptr<const Grammar> g, const std::vector<std::string>& token_bytes,
              const std::vector<bool>& is_text)
      : TokenMasker(std::move(g), std::make_shared<VocabTrie>(token_bytes, is_text)) {}
  // allowed[id] = 1 when the token keeps the text inside the grammar. Sized to the vocabulary.
  const std::vector<uint8_t>& mask(const Grammar::State& s);
  const Grammar& grammar() const { return *g_; }
  uint64_t cache_hits() const { return hits_; }
  uint64_t cache_misses() const { return misses_; }

 private:
  void walk(uint32_t node, const Grammar::State& s, std::vector<uint8_t>& out) const;
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const VocabTrie> trie_;
  struct Entry {
    Grammar::State state;
    std::vector<uint8_t> mask;
  };
  std::vector<Entry> cache_;  // small LRU (most recent last)
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace bloomery::server
