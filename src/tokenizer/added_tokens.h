// tokenizer.json "added_tokens": tokens matched in the text before pre-tokenization (special and normal, with
// lstrip / rstrip / single_word / normalized), found leftmost-longest exactly as HF's AddedVocabulary does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bloomery {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// One set of patterns (HF keeps two: tokens matched on the raw text, and normalized tokens matched on the
// normalized text).
class AddedTokenMatcher {
 public:
  // `patterns[i]` is what is searched for token `tokens[i]` (its content, normalized for normalized tokens).
  void build(std::vector<const AddedToken*> tokens, std::vector<std::string> patterns);
  bool empty() const { return tokens_.empty(); }

  struct Segment {
    size_t start, end;
    int32_t id;  // -1: plain text to tokenize
  };
  // Cuts `text` into plain-text and added-token segments covering it. With skip_special, special tokens are
  // not matched (their text stays plain text), like HF's encode_special_tokens.
  void split(std::string_view text, bool skip_special, std::vector<Segment>& out) const;

 private:
  std::vector<const AddedToken*> tokens_;
  std::vector<std::string> patterns_;
  // For each first byte, the pattern indices starting with it, longest first (leftmost-longest matching).
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace bloomery
