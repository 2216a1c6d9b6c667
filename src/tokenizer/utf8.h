// UTF-8 helpers for the tokenizer: validation, U+FFFD replacement (maximal subpart), code point iteration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bloomery::utf8 {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not one
// (overlong forms, surrogates, code points above U+10FFFF and truncated sequences are all invalid).
size_t valid_sequence_length(std::string_view s, size_t i);

bool is_valid(std::string_view s);

// Replaces every invalid sequence by U+FFFD, one per "maximal subpart" (Unicode 15, §3.9 U+FFFD
// substitution), exactly as Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do.
std::string replace_invalid(std::string_view s);

// Number of bytes at the end of s that form an incomplete but so far valid sequence (0..3): a streaming
// decoder holds these back until the next token completes (or breaks) them.
size_t incomplete_tail(std::string_view s);

// Decodes the code point at s[i] (s must be valid there) and advances i.
char32_t next(std::string_view s, size_t& i);

void append(std::string& out, char32_t cp);

}  // namespace bloomery::utf8
