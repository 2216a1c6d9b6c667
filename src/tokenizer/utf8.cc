#include "tokenizer/utf8.h"

namespace bloomery::utf8 {
namespace {

// For a lead byte: total sequence length (0 = never a lead byte) and the allowed range of the second byte,
// which is where overlong forms, surrogates and > U+10FFFF are excluded (Unicode Table 3-7).
struct Lead {
  uint8_t len;
  uint8_t lo;
  uint8_t hi;
};

Lead lead_info(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c >= 0xE1 && c <= 0xEF) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes starting at i belong to a valid prefix of a sequence (the maximal subpart), and
// whether that prefix is the whole sequence.
size_t maximal_prefix(std::string_view s, size_t i, bool& complete) {
  auto c = static_cast<uint8_t>(s[i]);
  Lead lead = lead_info(c);
  complete = false;
  if (lead.len == 0) return 0;
  if (lead.len == 1) {
    complete = true;
    return 1;
  }
  size_t n = 1;
  for (; n < lead.len; ++n) {
    if (i + n >= s.size()) return n;
    auto b = static_cast<uint8_t>(s[i + n]);
    uint8_t lo = n == 1 ? lead.lo : 0x80;
    uint8_t hi = n == 1 ? lead.hi : 0xBF;
    if (b < lo || b > hi) return n;
  }
  complete = true;
  return n;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  bool complete = false;
  size_t n = maximal_prefix(s, i, complete);
  return complete ? n : 0;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs are the common case.
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = valid_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    bool complete = false;
    size_t n = maximal_prefix(s, i, complete);
    if (complete) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += n == 0 ? 1 : n;
    }
  }
  return out;
}

size_t incomplete_tail(std::string_view s) {
  // A sequence is at most 4 bytes, so its lead byte is among the last 3 bytes when incomplete.
  size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = s.size(); i-- > start;) {
    auto c = static_cast<uint8_t>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    bool complete = false;
    size_t n = maximal_prefix(s, i, complete);
    // Incomplete only if every byte from the lead to the end is a valid prefix.
    if (!complete && n > 0 && i + n == s.size()) return s.size() - i;
    return 0;
  }
  return 0;
}

char32_t next(std::string_view s, size_t& i) {
  auto c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  char32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace bloomery::utf8
