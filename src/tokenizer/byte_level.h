// GPT-2 byte-level alphabet: every byte maps to one printable code point (and back), so BPE vocabularies
// can spell arbitrary bytes as text ("Ġ" is the space byte).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bloomery::byte_level {

// The code point that stands for byte b.
char32_t char_for_byte(uint8_t b);

// UTF-8 spelling of char_for_byte(b), precomputed.
const std::string& utf8_for_byte(uint8_t b);

// The byte that code point cp stands for, if it is one of the 256 alphabet characters.
std::optional<uint8_t> byte_for_char(char32_t cp);

// Maps raw bytes to their byte-level spelling ("a b" -> "aĠb").
std::string encode(std::string_view bytes);

// Maps a byte-level spelled token back to bytes; nullopt if some character is outside the alphabet
// (then HF's ByteLevel decoder keeps the token's own UTF-8 bytes).
std::optional<std::string> decode(std::string_view token);

}  // namespace bloomery::byte_level
