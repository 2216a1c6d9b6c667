#include "tokenizer/added_tokens.h"

#include <algorithm>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace bloomery {
namespace {

// Rust regex \w (Unicode): Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      // Other_Alphabetic characters outside L/M/Nl (a few symbols such as circled letters So).
      return (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
             (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
  }
}

// Unicode White_Space (Rust regex \s).
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Code point ending at byte `end` (exclusive) of valid UTF-8 text.
char32_t last_char(std::string_view s, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  return utf8::next(s, i);
}

}  // namespace

void AddedTokenMatcher::build(std::vector<const AddedToken*> tokens, std::vector<std::string> patterns) {
  tokens_ = std::move(tokens);
  patterns_ = std::move(patterns);
  for (auto& v : by_first_byte_) v.clear();
  for (uint32_t i = 0; i < patterns_.size(); ++i)
    if (!patterns_[i].empty()) by_first_byte_[static_cast<uint8_t>(patterns_[i][0])].push_back(i);
  for (auto& v : by_first_byte_)
    std::stable_sort(v.begin(), v.end(),
                     [&](uint32_t a, uint32_t b) { return patterns_[a].size() > patterns_[b].size(); });
}

void AddedTokenMatcher::split(std::string_view text, bool skip_special, std::vector<Segment>& out) const {
  size_t start_offset = 0;  // end of the last emitted segment
  size_t pos = 0;           // where the leftmost-longest search resumes (end of the last raw match)
  while (pos < text.size()) {
    // Leftmost-longest: the first position where any pattern matches, and there the longest pattern.
    size_t mstart = text.size();
    uint32_t which = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto& cands = by_first_byte_[static_cast<uint8_t>(text[i])];
      if (cands.empty()) continue;
      bool found = false;
      for (uint32_t c : cands) {
        const auto& p = patterns_[c];
        if (text.size() - i >= p.size() && text.compare(i, p.size(), p) == 0) {
          mstart = i;
          which = c;
          found = true;
          break;
        }
      }
      if (found) break;
    }
    if (mstart == text.size()) break;
    size_t start = mstart;
    size_t stop = mstart + patterns_[which].size();
    pos = stop;
    const AddedToken& tok = *tokens_[which];
    if (skip_special && tok.special) continue;
    if (tok.single_word) {
      size_t cs = 0;
      bool start_space = start == 0 || !is_word_char(last_char(text, start, cs));
      bool stop_space = stop == text.size();
      if (!stop_space) {
        size_t i = stop;
        stop_space = !is_word_char(utf8::next(text, i));
      }
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      // Spaces just before the token belong to it, unless an earlier token already took them.
      size_t s = start;
      while (s > 0) {
        size_t cs = 0;
        char32_t c = last_char(text, s, cs);
        if (!is_space(c)) break;
        s = cs;
      }
      start = std::max(s, start_offset);
    }
    if (tok.rstrip) {
      size_t i = stop;
      while (i < text.size()) {
        size_t j = i;
        if (!is_space(utf8::next(text, j))) break;
        i = j;
      }
      stop = i;
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace bloomery
