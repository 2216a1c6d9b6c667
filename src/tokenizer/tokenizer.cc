#include "tokenizer/tokenizer.h"

#include <fstream>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace bloomery {

struct Tokenizer::Impl {
  std::string name;
  std::unique_ptr<Bpe> bpe;
  Normalizer normalizer;
  PreTokenizer pretokenizer;
  Decoder decoder;
  std::vector<AddedToken> added;
  std::vector<int32_t> added_index;             // id -> index into `added`, -1 if not an added token
  AddedTokenMatcher raw_matcher;                // tokens with normalized=false, matched on the raw text
  AddedTokenMatcher norm_matcher;               // tokens with normalized=true, matched on the normalized text
  std::vector<int32_t> prefix_ids, suffix_ids;  // TemplateProcessing's single-sequence specials
  int32_t id_end = 0;

  std::optional<int32_t> bos, eos;
  std::vector<int32_t> eos_all;
  bool add_bos = false;
  std::string bos_text, eos_text;

  const AddedToken* added_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= added_index.size() || added_index[id] < 0) return nullptr;
    return &added[added_index[id]];
  }
  std::optional<int32_t> to_id(std::string_view token) const {
    for (const auto& a : added)
      if (a.content == token) return a.id;
    return bpe->token_to_id(token);
  }
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  void parse_post_processor(const nlohmann::json& j, const std::string& path);
};

namespace {

[[noreturn]] void unsupported(const std::string& file, const std::string& path, const std::string& expected,
                              const std::string& found) {
  raise("E_TOK_UNSUPPORTED", Where{file, {}, path}, expected, found);
}

bool json_bool(const nlohmann::json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

nlohmann::json parse_json_file(const std::filesystem::path& path) {
  std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    raise("E_TOK_BAD_JSON", Where{path.string(), {}, {}}, "valid JSON", e.what());
  }
}

// tokenizer_config.json spells a token either as "text" or as {"content": "text", ...}.
std::string token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return {};
}

}  // namespace

void Tokenizer::Impl::parse_post_processor(const nlohmann::json& j, const std::string& path) {
  if (j.is_null()) return;
  std::string type =
      j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (type == "ByteLevel") return;  // only trims offsets
  if (type == "Sequence" && j.contains("processors") && j["processors"].is_array()) {
    for (size_t i = 0; i < j["processors"].size(); ++i)
      parse_post_processor(j["processors"][i], path + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type != "TemplateProcessing")
    unsupported(name, path, "null, ByteLevel, TemplateProcessing or a Sequence of them",
                type.empty() ? j.dump() : type);
  if (!j.contains("single") || !j["single"].is_array())
    unsupported(name, path + ".single", "an array", j.dump());
  bool seen_sequence = false;
  for (size_t i = 0; i < j["single"].size(); ++i) {
    const auto& item = j["single"][i];
    std::string item_path = fmt::format("{}.single[{}]", path, i);
    if (item.contains("Sequence")) {
      seen_sequence = true;
    } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id")) {
      std::string key = item["SpecialToken"]["id"].get<std::string>();
      const auto& specials = j.contains("special_tokens") ? j["special_tokens"] : nlohmann::json::object();
      if (!specials.contains(key) || !specials[key].contains("ids") || !specials[key]["ids"].is_array())
        raise("E_TOK_BAD_MODEL", Where{name, {}, path + ".special_tokens"}, "an entry with ids for " + key,
              "none");
      for (const auto& id : specials[key]["ids"])
        (seen_sequence ? suffix_ids : prefix_ids).push_back(id.get<int32_t>());
    } else {
      unsupported(name, item_path, "Sequence or SpecialToken", item.dump());
    }
  }
}

Tokenizer Tokenizer::from_json(const nlohmann::json& j, const std::string& name) {
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  if (!j.is_object()) raise("E_TOK_BAD_JSON", Where{name, {}, {}}, "a JSON object", j.type_name());
  const auto& model = j.contains("model") ? j["model"] : nlohmann::json();
  if (!model.is_object()) raise("E_TOK_BAD_MODEL", Where{name, {}, "model"}, "an object", model.type_name());
  std::string type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>()
                     : model.contains("merges")                          ? "BPE"
                                                                         : "";
  if (type != "BPE") unsupported(name, "model.type", "BPE", type.empty() ? "no type" : type);

  auto get = [&](const char* key) { return j.contains(key) ? j[key] : nlohmann::json(); };
  impl->normalizer = Normalizer::from_json(get("normalizer"), name);
  impl->pretokenizer = PreTokenizer::from_json(get("pre_tokenizer"), name);
  impl->decoder = Decoder::from_json(get("decoder"), name);
  impl->parse_post_processor(get("post_processor"), "post_processor");
  impl->bpe = Bpe::from_json(model, name);
  impl->id_end = impl->bpe->id_end();

  const auto added = get("added_tokens");
  if (!added.is_null() && !added.is_array())
    raise("E_TOK_BAD_MODEL", Where{name, {}, "added_tokens"}, "an array", added.type_name());
  for (size_t i = 0; added.is_array() && i < added.size(); ++i) {
    const auto& a = added[i];
    std::string path = fmt::format("added_tokens[{}]", i);
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id") ||
        !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() >= (1LL << 30))
      raise("E_TOK_BAD_MODEL", Where{name, {}, path}, "{\"id\": <id>, \"content\": <text>, ...}", a.dump());
    AddedToken t;
    t.content = a["content"].get<std::string>();
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    t.special = json_bool(a, "special", false);
    t.single_word = json_bool(a, "single_word", false);
    t.lstrip = json_bool(a, "lstrip", false);
    t.rstrip = json_bool(a, "rstrip", false);
    t.normalized = json_bool(a, "normalized", !t.special);
    // HF's AddedVocabulary ignores the file's ids: a token keeps its id if already added or in the model
    // vocabulary; otherwise it takes the next id after the model vocabulary and the tokens added so far.
    bool duplicate = false;
    for (auto& prev : impl->added)
      if (prev.content == t.content) {
        t.id = prev.id;
        prev = t;  // a later entry for the same text replaces the earlier one
        duplicate = true;
      }
    if (duplicate) continue;
    if (auto in_vocab = impl->bpe->token_to_id(t.content)) {
      t.id = *in_vocab;
    } else {
      auto model_size = static_cast<int32_t>(impl->bpe->vocab_size());
      int32_t max_added = -1;
      for (const auto& prev : impl->added) max_added = std::max(max_added, prev.id);
      t.id = max_added < 0 ? model_size
                           : (max_added >= model_size || model_size == 0 ? max_added + 1 : model_size);
    }
    impl->added.push_back(t);
  }
  for (size_t i = 0; i < impl->added.size(); ++i) {
    int32_t id = impl->added[i].id;
    if (id >= impl->id_end) impl->id_end = id + 1;
  }
  impl->added_index.assign(static_cast<size_t>(impl->id_end), -1);
  for (size_t i = 0; i < impl->added.size(); ++i)
    impl->added_index[impl->added[i].id] = static_cast<int32_t>(i);

  // HF orders special tokens before the other added tokens; order only matters for identical patterns.
  std::vector<const AddedToken*> raw_tokens, norm_tokens;
  std::vector<std::string> raw_patterns, norm_patterns;
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& t : impl->added) {
      if (t.special != (pass == 0)) continue;
      if (t.normalized) {
        norm_tokens.push_back(&t);
        norm_patterns.push_back(impl->normalizer.empty() ? t.content : impl->normalizer.apply(t.content));
      } else {
        raw_tokens.push_back(&t);
        raw_patterns.push_back(t.content);
      }
    }
  impl->raw_matcher.build(std::move(raw_tokens), std::move(raw_patterns));
  impl->norm_matcher.build(std::move(norm_tokens), std::move(norm_patterns));
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  if (!std::filesystem::is_regular_file(tokenizer_json))
    raise("E_TOK_NOT_FOUND", Where{tokenizer_json.string(), {}, {}}, "a tokenizer.json file", "no such file");
  return from_json(parse_json_file(tokenizer_json), tokenizer_json.string());
}

Tokenizer Tokenizer::from_folder(const std::filesystem::path& folder) {
  Tokenizer tok = from_file(folder / "tokenizer.json");
  auto impl = std::const_pointer_cast<Impl>(tok.impl_);
  auto id_of = [&](const std::string& text, const std::filesystem::path& file, const char* field) {
    auto id = impl->to_id(text);
    if (!id)
      raise("E_TOK_BAD_CONFIG", Where{file.string(), {}, field}, "a token of tokenizer.json",
            "'" + text + "'");
    return *id;
  };
  auto cfg_path = folder / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(cfg_path)) {
    auto cfg = parse_json_file(cfg_path);
    if (cfg.contains("bos_token")) impl->bos_text = token_text(cfg["bos_token"]);
    if (cfg.contains("eos_token")) impl->eos_text = token_text(cfg["eos_token"]);
    if (!impl->bos_text.empty()) impl->bos = id_of(impl->bos_text, cfg_path, "bos_token");
    if (!impl->eos_text.empty()) impl->eos = id_of(impl->eos_text, cfg_path, "eos_token");
    impl->add_bos = json_bool(cfg, "add_bos_token", false) && impl->bos.has_value();
  }
  if (impl->eos) impl->eos_all.push_back(*impl->eos);
  auto gen_path = folder / "generation_config.json";
  if (std::filesystem::is_regular_file(gen_path)) {
    auto gen = parse_json_file(gen_path);
    auto check = [&](const nlohmann::json& v, const char* field) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= impl->id_end)
        raise("E_TOK_BAD_CONFIG", Where{gen_path.string(), {}, field},
              fmt::format("an id below {}", impl->id_end), v.dump());
      return v.get<int32_t>();
    };
    if (gen.contains("bos_token_id") && !gen["bos_token_id"].is_null() && !impl->bos)
      impl->bos = check(gen["bos_token_id"], "bos_token_id");
    if (gen.contains("eos_token_id") && !gen["eos_token_id"].is_null()) {
      const auto& e = gen["eos_token_id"];
      std::vector<int32_t> ids;
      if (e.is_array())
        for (const auto& v : e) ids.push_back(check(v, "eos_token_id"));
      else
        ids.push_back(check(e, "eos_token_id"));
      for (int32_t id : ids)
        if (std::find(impl->eos_all.begin(), impl->eos_all.end(), id) == impl->eos_all.end())
          impl->eos_all.push_back(id);
      if (!impl->eos && !ids.empty()) impl->eos = ids.front();
    }
  }
  return tok;
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (pretokenizer.byte_level())
    pretokenizer.split(text, [&](std::string_view piece) { bpe->encode_bytes(piece, out); });
  else
    pretokenizer.split(text, [&](std::string_view piece) { bpe->encode_word(piece, out); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special, bool add_special) const {
  const Impl& im = *impl_;
  std::string cleaned;
  if (!utf8::is_valid(text)) {
    cleaned = utf8::replace_invalid(text);
    text = cleaned;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special) out.insert(out.end(), im.prefix_ids.begin(), im.prefix_ids.end());
  std::vector<AddedTokenMatcher::Segment> raw_segments, norm_segments;
  // 1. Added tokens matched on the raw text; 2. the rest normalized, then normalized added tokens matched;
  // 3. the remaining text pre-tokenized and encoded by the model (HF's extract_and_normalize + encode).
  im.raw_matcher.split(text, !parse_special, raw_segments);
  for (const auto& seg : raw_segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    std::string_view plain = text.substr(seg.start, seg.end - seg.start);
    std::string normalized;
    if (!im.normalizer.empty()) {
      normalized = im.normalizer.apply(plain);
      plain = normalized;
    }
    if (im.norm_matcher.empty()) {
      im.encode_plain(plain, out);
      continue;
    }
    norm_segments.clear();
    im.norm_matcher.split(plain, !parse_special, norm_segments);
    for (const auto& ns : norm_segments) {
      if (ns.id >= 0)
        out.push_back(ns.id);
      else
        im.encode_plain(plain.substr(ns.start, ns.end - ns.start), out);
    }
  }
  if (add_special) out.insert(out.end(), im.suffix_ids.begin(), im.suffix_ids.end());
  return out;
}

void Tokenizer::append_piece(int32_t id, bool first, std::string& out) const {
  const Impl& im = *impl_;
  if (const AddedToken* a = im.added_token(id)) {
    im.decoder.append(a->content, first, out);
    return;
  }
  const std::string* s = im.bpe->id_to_token(id);
  if (!s)
    raise("E_TOK_BAD_ID", Where{im.name, {}, {}}, fmt::format("a token id below {}", im.id_end),
          std::to_string(id));
  im.decoder.append(*s, first, out);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    if (!first && joins_with_space()) out.push_back(' ');
    append_piece(id, first, out);
    first = false;
  }
  return out;
}

std::string Tokenizer::decode_text(std::span<const int32_t> ids, bool skip_special) const {
  return utf8::replace_invalid(decode(ids, skip_special));
}

std::string Tokenizer::piece(int32_t id) const {
  std::string out;
  append_piece(id, false, out);
  return out;
}

std::string Tokenizer::token_string(int32_t id) const {
  if (const AddedToken* a = impl_->added_token(id)) return a->content;
  const std::string* s = impl_->bpe->id_to_token(id);
  if (!s)
    raise("E_TOK_BAD_ID", Where{impl_->name, {}, {}}, fmt::format("a token id below {}", impl_->id_end),
          std::to_string(id));
  return *s;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->to_id(token);
}
int32_t Tokenizer::vocab_size() const {
  return impl_->id_end;
}
bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* a = impl_->added_token(id);
  return a && a->special;
}
bool Tokenizer::is_added(int32_t id) const {
  return impl_->added_token(id) != nullptr;
}
const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}
bool Tokenizer::joins_with_space() const {
  return impl_->decoder.joins_with_space();
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos;
}
const std::vector<int32_t>& Tokenizer::eos_ids() const {
  return impl_->eos_all;
}
bool Tokenizer::add_bos() const {
  return impl_->add_bos;
}
const std::string& Tokenizer::bos_token() const {
  return impl_->bos_text;
}
const std::string& Tokenizer::eos_token() const {
  return impl_->eos_text;
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  if (!first_ && tok_->joins_with_space()) held_.push_back(' ');
  tok_->append_piece(id, first_, held_);
  first_ = false;
  size_t tail = utf8::incomplete_tail(held_);
  std::string ready = utf8::replace_invalid(std::string_view(held_).substr(0, held_.size() - tail));
  held_.erase(0, held_.size() - tail);
  return ready;
}

std::string StreamDecoder::finish() {
  std::string rest = utf8::replace_invalid(held_);
  held_.clear();
  first_ = true;
  return rest;
}

}  // namespace bloomery
