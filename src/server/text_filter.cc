#include "server/text_filter.h"

#include <algorithm>

namespace bloomery::server {

size_t partial_suffix(std::string_view text, std::string_view word) {
  size_t max = std::min(text.size(), word.empty() ? 0 : word.size() - 1);
  for (size_t n = max; n > 0; --n)
    if (text.substr(text.size() - n) == word.substr(0, n)) return n;
  return 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view text) {
  if (matched_) return {};
  pending_.append(text);
  // The earliest complete stop string wins (on equal starts, the longest).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    size_t at = pending_.find(s);
    if (at == std::string::npos) continue;
    if (at < best || (at == best && s.size() > word_.size())) {
      best = at;
      word_ = s;
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  size_t hold = 0;
  for (const auto& s : stops_) hold = std::max(hold, partial_suffix(pending_, s));
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (matched_) return {};
  std::string out;
  out.swap(pending_);
  return out;
}

ReasoningSplitter::ReasoningSplitter(bool enabled, bool start_in_reasoning, std::string open,
                                     std::string close)
    : enabled_(enabled),
      state_(!enabled             ? State::Content
             : start_in_reasoning ? State::Reasoning
                                  : State::Start),
      open_(std::move(open)),
      close_(std::move(close)) {}

ReasoningSplitter::Out ReasoningSplitter::push(std::string_view text) {
  Out out;
  pending_.append(text);
  while (!pending_.empty()) {
    if (state_ == State::Content) {
      if (skip_newlines_) {
        size_t b = pending_.find_first_not_of("\n");
        if (b == std::string::npos) {
          pending_.clear();
          return out;
        }
        pending_.erase(0, b);
        skip_newlines_ = false;
      }
      out.content += pending_;
      pending_.clear();
    } else if (state_ == State::Start) {
      size_t b = pending_.find_first_not_of(" \t\r\n");
      if (b == std::string::npos) return out;  // only whitespace so far: undecided
      std::string_view rest = std::string_view(pending_).substr(b);
      if (rest.size() >= open_.size()) {
        if (rest.substr(0, open_.size()) == open_) {
          pending_.erase(0, b + open_.size());
          state_ = State::Reasoning;
        } else {
          state_ = State::Content;
        }
      } else if (open_.compare(0, rest.size(), rest) == 0) {
        return out;  // a partial "<think>": wait
      } else {
        state_ = State::Content;
      }
    } else {  // Reasoning
      size_t at = pending_.find(close_);
      if (at != std::string::npos) {
        out.reasoning += pending_.substr(0, at);
        pending_.erase(0, at + close_.size());
        // Templates put a blank line after </think>; it is not part of the answer.
        skip_newlines_ = true;
        state_ = State::Content;
        continue;
      }
      size_t hold = partial_suffix(pending_, close_);
      out.reasoning += pending_.substr(0, pending_.size() - hold);
      pending_.erase(0, pending_.size() - hold);
      return out;
    }
  }
  return out;
}

ReasoningSplitter::Out ReasoningSplitter::flush() {
  Out out;
  if (state_ == State::Reasoning)
    out.reasoning = pending_;
  else
    out.content = pending_;
  pending_.clear();
  return out;
}

}  // namespace bloomery::server
