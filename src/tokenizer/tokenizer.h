// A tokenizer.json BPE tokenizer that gives exactly HF tokenizers' ids: added tokens, normalizer,
// pre-tokenizer, BPE model, decoder; plus the BOS/EOS facts of tokenizer_config.json and
// generation_config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/added_tokens.h"

namespace bloomery {

class Tokenizer {
 public:
  // tokenizer.json alone. Throws E_TOK_NOT_FOUND, E_TOK_BAD_JSON, E_TOK_UNSUPPORTED (naming the JSON path of
  // the part it cannot reproduce exactly), E_TOK_BAD_MODEL, E_TOK_BAD_MERGE, E_TOK_REGEX.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  // A model folder: tokenizer.json plus, when present, tokenizer_config.json (bos/eos token, add_bos_token)
  // and generation_config.json (bos_token_id, eos_token_id: one id or a list).
  static Tokenizer from_folder(const std::filesystem::path& folder);
  // An already parsed tokenizer.json; `name` is used in errors.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const std::string& name);

  // Text to ids. Invalid UTF-8 is first replaced by U+FFFD (maximal subparts), as a str-taking caller would
  // see it. parse_special=false treats special added tokens' text as plain text (HF encode_special_tokens);
  // non-special added tokens (e.g. "<think>") are still matched. add_special adds the post-processor's
  // tokens (TemplateProcessing), never anything for ByteLevel.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true,
                              bool add_special = false) const;

  // Ids to bytes (raw: an id sequence may end inside a character). Unknown ids throw E_TOK_BAD_ID.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // decode() with invalid UTF-8 replaced by U+FFFD (HF's decode result).
  std::string decode_text(std::span<const int32_t> ids, bool skip_special = false) const;

  // The bytes one token stands for in the middle of a text (" hello" for "Ġhello", "\xE3" for "<0xE3>").
  std::string piece(int32_t id) const;
  // The bytes of the token at position `first` or later in a stream (see Decoder::append).
  void append_piece(int32_t id, bool first, std::string& out) const;
  // The vocabulary spelling ("Ġhello"), HF's id_to_token.
  std::string token_string(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;

  // One past the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  // True when the decoder joins tokens with spaces (no decoder in tokenizer.json).
  bool joins_with_space() const;

  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // Every id that ends generation: tokenizer_config's eos_token first, then generation_config's
  // eos_token_id(s).
  const std::vector<int32_t>& eos_ids() const;
  bool add_bos() const;
  // Token texts for chat templates ("" when unset).
  const std::string& bos_token() const;
  const std::string& eos_token() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Turns ids arriving one at a time into text that is always whole UTF-8: a character cut by a token boundary
// (byte-level or "<0xE3>" byte-fallback pieces) is held back until complete; bytes that can never complete a
// character come out as U+FFFD. The concatenation of every push() and finish() equals decode_text(ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tok_(&tokenizer), skip_special_(skip_special) {}
  // The text that became complete with this token (may be empty).
  std::string push(int32_t id);
  // Whatever is still held back, incomplete characters replaced by U+FFFD; the decoder can then be reused.
  std::string finish();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t held() const { return held_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  bool first_ = true;
  std::string held_;
};

}  // namespace bloomery
