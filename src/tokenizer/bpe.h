// Byte-pair-encoding model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked merges and
// the merge loop, with a cache of finished words. Produces exactly the ids of HF tokenizers' BPE model.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace bloomery {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Finished words by their input spelling. Lookups are thread-safe; sharded so threads rarely share a lock.
// Once full, new words are no longer stored (as in HF), which changes speed only, never ids.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;
  bool get(std::string_view word, std::vector<int32_t>& out) const;
  void put(std::string_view word, const int32_t* ids, size_t n) const;

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kPerShard = 4096;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

// Pair (left id, right id) -> (rank, merged id), open addressing; built once, read-only afterwards.
class MergeTable {
 public:
  struct Value {
    int32_t rank;
    int32_t id;
  };
  void build(const std::vector<std::pair<uint64_t, Value>>& entries);
  const Value* find(int32_t left, int32_t right) const;
  size_t size() const { return count_; }

 private:
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  uint64_t mask_ = 0;
  size_t count_ = 0;
};

class Bpe {
 public:
  // `model` is tokenizer.json's "model" object; `file` names the file in errors. Refuses (E_TOK_*) merges
  // whose parts or result are not in the vocabulary, dropout, and malformed entries.
  static std::unique_ptr<Bpe> from_json(const nlohmann::json& model, const std::string& file);

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary string of id, or nullptr if id is not in the model's vocabulary.
  const std::string* id_to_token(int32_t id) const;
  // Number of vocabulary entries (HF's get_vocab_size) and one past the largest id.
  size_t vocab_size() const { return vocab_.size(); }
  int32_t id_end() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t merge_count() const { return merges_.size(); }
  bool byte_fallback() const { return byte_fallback_; }

  // Appends the tokens of one pre-tokenized word spelled in the vocabulary's alphabet.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Appends the tokens of raw bytes whose vocabulary spelling is byte-level (GPT-2 alphabet); the same ids as
  // encode_word(byte_level::encode(raw)) without building that string.
  void encode_bytes(std::string_view raw, std::vector<int32_t>& out) const;

 private:
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  void merge_symbols(std::vector<Symbol>& symbols, std::vector<int32_t>& out) const;
  void encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  MergeTable merges_;
  std::optional<std::string> unk_token_;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_symbol_{};  // id of each byte's byte-level spelling, -1 if absent
  bool fast_bytes_ = false;                 // every byte has a symbol and no prefix/suffix applies
  WordCache word_cache_;
  WordCache bytes_cache_;
};

}  // namespace bloomery
