// libFuzzer target: arbitrary bytes as text for the tokenizer of the qwen3_next fixture (byte-level BPE with
// a pre-tokenizer regex, NFC normalizer and added tokens; src/tokenizer/). Encoding must never throw; the ids
// must be in the vocabulary; decode(encode(x)) == x for every valid UTF-8 x that is already NFC (the
// normalizer changes other text, as HF's does); StreamDecoder's concatenation equals decode_text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <utf8proc.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const bloomery::Tokenizer& fixture_tokenizer() {
  // The source tree's path is compiled in (as the unit tests do), so the binary runs from any directory.
  static const bloomery::Tokenizer tok = bloomery::Tokenizer::from_folder(
      std::string(BLOOMERY_SOURCE_DIR) + "/tests/fixtures/models/qwen3_next-bf16");
  return tok;
}

bool is_nfc(std::string_view text) {
  utf8proc_uint8_t* nfc = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(std::string(text).c_str()));
  if (nfc == nullptr) return false;
  const bool same = text == reinterpret_cast<const char*>(nfc);
  std::free(nfc);
  return same;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bloomery::Tokenizer& tok = fixture_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool round_trips =
      bloomery::utf8::is_valid(text) && text.find('\0') == std::string_view::npos && is_nfc(text);
  for (const bool parse_special : {true, false}) {
    const std::vector<int32_t> ids = tok.encode(text, parse_special);
    for (const int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    const std::string back = tok.decode(ids);
    if (round_trips && back != text) std::abort();
    const std::string shown = tok.decode_text(ids);
    bloomery::StreamDecoder stream(tok);
    std::string streamed;
    for (const int32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (streamed != shown) std::abort();
  }
  return 0;
}
