#include "tokenizer/byte_level.h"

#include <vector>

#include "tokenizer/utf8.h"

namespace bloomery::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8{};
  Tables() {
    // Printable bytes stand for themselves; the other 68 bytes take code points 256, 257, ... in byte order.
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    char32_t next_cp = 256;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = printable(b) ? static_cast<char32_t>(b) : next_cp++;
      utf8::append(to_utf8[b], to_char[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_for_byte(uint8_t b) {
  return tables().to_char[b];
}

const std::string& utf8_for_byte(uint8_t b) {
  return tables().to_utf8[b];
}

std::optional<uint8_t> byte_for_char(char32_t cp) {
  if (cp < 256) {
    const auto& t = tables();
    if (t.to_char[cp] == cp) return static_cast<uint8_t>(cp);
    return std::nullopt;
  }
  if (cp >= 256 + 68) return std::nullopt;
  // Code point 256 + k stands for the k-th non-printable byte.
  const auto& t = tables();
  for (int b = 0; b < 256; ++b)
    if (t.to_char[b] == cp) return static_cast<uint8_t>(b);
  return std::nullopt;
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += utf8_for_byte(b);
  return out;
}

std::optional<std::string> decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    if (utf8::valid_sequence_length(token, i) == 0) return std::nullopt;
    auto b = byte_for_char(utf8::next(token, i));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace bloomery::byte_level
