#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace bloomery {

bool WordCache::get(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() >= kMaxWordBytes) return false;
  size_t h = StringHash{}(word);
  Shard& shard = shards_[h % kShards];
  std::lock_guard lock(shard.mu);
  auto it = shard.map.find(word);
  if (it == shard.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::put(std::string_view word, const int32_t* ids, size_t n) const {
  if (word.size() >= kMaxWordBytes) return;
  size_t h = StringHash{}(word);
  Shard& shard = shards_[h % kShards];
  std::lock_guard lock(shard.mu);
  if (shard.map.size() >= kPerShard) return;
  shard.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
}

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

constexpr uint64_t kEmpty = ~0ULL;

}  // namespace

void MergeTable::build(const std::vector<std::pair<uint64_t, Value>>& entries) {
  size_t cap = 16;
  while (cap < entries.size() * 2) cap <<= 1;
  keys_.assign(cap, kEmpty);
  values_.assign(cap, Value{0, 0});
  mask_ = cap - 1;
  count_ = 0;
  for (const auto& [key, value] : entries) {
    uint64_t slot = mix(key) & mask_;
    while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask_;
    if (keys_[slot] == kEmpty) ++count_;
    // A pair listed twice keeps its later rank, as HF's HashMap collect does.
    keys_[slot] = key;
    values_[slot] = value;
  }
}

const MergeTable::Value* MergeTable::find(int32_t left, int32_t right) const {
  if (keys_.empty()) return nullptr;
  uint64_t key = pair_key(left, right);
  uint64_t slot = mix(key) & mask_;
  while (true) {
    uint64_t k = keys_[slot];
    if (k == key) return &values_[slot];
    if (k == kEmpty) return nullptr;
    slot = (slot + 1) & mask_;
  }
}

std::unique_ptr<Bpe> Bpe::from_json(const nlohmann::json& model, const std::string& file) {
  auto bpe = std::make_unique<Bpe>();
  auto bad = [&](const std::string& field, const std::string& expected, const std::string& found) {
    raise("E_TOK_BAD_MODEL", Where{file, {}, "model." + field}, expected, found);
  };
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    double p = model["dropout"].is_number() ? model["dropout"].get<double>() : -1.0;
    // Dropout makes encoding random; an inference server must not use it.
    if (p != 0.0)
      raise("E_TOK_UNSUPPORTED", Where{file, {}, "model.dropout"}, "null", model["dropout"].dump());
  }
  auto opt_string = [&](const char* key) -> std::optional<std::string> {
    if (!model.contains(key) || model[key].is_null()) return std::nullopt;
    if (!model[key].is_string()) bad(key, "a string or null", model[key].dump());
    return model[key].get<std::string>();
  };
  auto opt_bool = [&](const char* key) -> bool {
    if (!model.contains(key) || model[key].is_null()) return false;
    if (!model[key].is_boolean()) bad(key, "a boolean", model[key].dump());
    return model[key].get<bool>();
  };
  bpe->unk_token_ = opt_string("unk_token");
  bpe->prefix_ = opt_string("continuing_subword_prefix").value_or("");
  bpe->suffix_ = opt_string("end_of_word_suffix").value_or("");
  bpe->fuse_unk_ = opt_bool("fuse_unk");
  bpe->byte_fallback_ = opt_bool("byte_fallback");
  bpe->ignore_merges_ = opt_bool("ignore_merges");

  if (!model.contains("vocab") || !model["vocab"].is_object())
    bad("vocab", "an object of token -> id",
        model.contains("vocab") ? model["vocab"].type_name() : "nothing");
  const auto& vocab = model["vocab"];
  bpe->vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= (1LL << 30))
      bad("vocab[" + it.key() + "]", "an id in [0, 2^30)", it.value().dump());
    auto id = static_cast<int32_t>(it.value().get<int64_t>());
    bpe->vocab_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  bpe->id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  bpe->has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : bpe->vocab_) {
    if (bpe->has_id_[id])
      bad("vocab", fmt::format("each id once"),
          fmt::format("id {} for both '{}' and '{}'", id, bpe->id_to_token_[id], token));
    bpe->id_to_token_[id] = token;
    bpe->has_id_[id] = true;
  }

  if (!model.contains("merges") || !model["merges"].is_array())
    bad("merges", "an array", model.contains("merges") ? model["merges"].type_name() : "nothing");
  const auto& merges = model["merges"];
  std::vector<std::pair<uint64_t, MergeTable::Value>> entries;
  entries.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    std::string a, b;
    // Two spellings exist: "a b" (older files) and ["a", "b"] (tokenizers >= 0.20).
    if (m.is_string()) {
      const auto& s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        raise("E_TOK_BAD_MERGE", Where{file, {}, fmt::format("model.merges[{}]", rank)}, "\"left right\"",
              m.dump());
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      raise("E_TOK_BAD_MERGE", Where{file, {}, fmt::format("model.merges[{}]", rank)},
            "\"left right\" or [\"left\", \"right\"]", m.dump());
    }
    auto ia = bpe->token_to_id(a);
    auto ib = bpe->token_to_id(b);
    // The right part loses its continuing-subword prefix when merged (HF: b[prefix_len..]).
    std::string merged =
        a + (b.size() >= bpe->prefix_.size() ? b.substr(bpe->prefix_.size()) : std::string());
    auto im = bpe->token_to_id(merged);
    if (!ia || !ib || !im)
      raise("E_TOK_BAD_MERGE", Where{file, {}, fmt::format("model.merges[{}]", rank)},
            "left, right and their concatenation in the vocabulary",
            fmt::format("'{}' + '{}' with '{}' missing", a, b,
                        !ia   ? a
                        : !ib ? b
                              : merged));
    entries.emplace_back(pair_key(*ia, *ib), MergeTable::Value{static_cast<int32_t>(rank), *im});
  }
  bpe->merges_.build(entries);

  bpe->fast_bytes_ = bpe->prefix_.empty() && bpe->suffix_.empty();
  for (int b = 0; b < 256; ++b) {
    auto id = bpe->token_to_id(byte_level::utf8_for_byte(static_cast<uint8_t>(b)));
    bpe->byte_symbol_[b] = id ? *id : -1;
    if (!id) bpe->fast_bytes_ = false;
  }
  return bpe;
}

std::optional<int32_t> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_end() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

// Repeatedly merges the adjacent pair of lowest rank, leftmost first on ties: HF's Word::merge_all (a
// min-heap on (rank, position) whose stale entries are skipped), which gives the same result as rescanning.
void Bpe::merge_symbols(std::vector<Symbol>& sym, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(sym.size());
  if (n >= 2) {
    struct Entry {
      int32_t rank;
      int32_t pos;
      int32_t id;
      bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<Entry> heap_storage;
    heap_storage.reserve(static_cast<size_t>(n));
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap(std::greater<Entry>{},
                                                                             std::move(heap_storage));
    for (int32_t i = 0; i + 1 < n; ++i)
      if (const auto* m = merges_.find(sym[i].id, sym[i + 1].id)) heap.push({m->rank, i, m->id});
    while (!heap.empty()) {
      Entry top = heap.top();
      heap.pop();
      Symbol& left = sym[top.pos];
      if (!left.alive || left.next < 0) continue;
      Symbol& right = sym[left.next];
      const auto* m = merges_.find(left.id, right.id);
      if (!m || m->id != top.id) continue;  // stale: one side has merged since this entry was pushed
      left.id = top.id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) sym[right.next].prev = top.pos;
      if (left.prev >= 0)
        if (const auto* mp = merges_.find(sym[left.prev].id, left.id))
          heap.push({mp->rank, left.prev, mp->id});
      if (left.next >= 0)
        if (const auto* mn = merges_.find(left.id, sym[left.next].id)) heap.push({mn->rank, top.pos, mn->id});
    }
  }
  for (const Symbol& s : sym)
    if (s.alive) out.push_back(s.id);
}

void Bpe::encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  auto add = [&](int32_t id) {
    int32_t i = static_cast<int32_t>(sym.size());
    sym.push_back({id, i - 1, -1, true});
    if (i > 0) sym[i - 1].next = i;
  };
  // Pending unknown token: HF flushes it before the next known symbol (not before byte-fallback symbols).
  int32_t pending_unk = -1;
  std::optional<int32_t> unk_id = unk_token_ ? token_to_id(*unk_token_) : std::nullopt;
  if (unk_token_ && !unk_id)
    raise("E_TOK_BAD_MODEL", Where{{}, {}, "model.unk_token"}, "a token in the vocabulary", *unk_token_);
  size_t i = 0;
  std::string s;
  while (i < word.size()) {
    size_t start = i;
    size_t len = utf8::valid_sequence_length(word, i);
    i += len == 0 ? 1 : len;
    bool first = start == 0;
    bool last = i >= word.size();
    s.assign(first ? "" : prefix_);
    s.append(word.substr(start, i - start));
    if (last) s.append(suffix_);
    if (auto id = token_to_id(s)) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (unsigned char c : s) {
        auto id = token_to_id(fmt::format("<0x{:02X}>", c));
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == s.size()) {
        for (int32_t id : bytes) add(id);
        continue;
      }
    }
    if (unk_id) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id;
    }
    // No unk token: the character is dropped, as in HF.
  }
  if (pending_unk >= 0) add(pending_unk);
  merge_symbols(sym, out);
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_)
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  if (word_cache_.get(word, out)) return;
  size_t before = out.size();
  encode_word_uncached(word, out);
  word_cache_.put(word, out.data() + before, out.size() - before);
}

void Bpe::encode_bytes(std::string_view raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  if (!fast_bytes_ || ignore_merges_) {
    encode_word(byte_level::encode(raw), out);
    return;
  }
  if (raw.size() == 1) {
    out.push_back(byte_symbol_[static_cast<uint8_t>(raw[0])]);
    return;
  }
  if (bytes_cache_.get(raw, out)) return;
  thread_local std::vector<Symbol> sym;
  sym.clear();
  for (size_t i = 0; i < raw.size(); ++i) {
    auto k = static_cast<int32_t>(i);
    sym.push_back({byte_symbol_[static_cast<uint8_t>(raw[i])], k - 1,
                   k + 1 < static_cast<int32_t>(raw.size()) ? k + 1 : -1, true});
  }
  size_t before = out.size();
  merge_symbols(sym, out);
  bytes_cache_.put(raw, out.data() + before, out.size() - before);
}

}  // namespace bloomery
