// Generated-text filters applied before anything reaches a client: stop strings (never emitted, not even
// partly: a tail that could begin a stop string is held back until it cannot) and the split of
// <think>…</think> text into reasoning_content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bloomery::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds generated text; returns the text that is now safe to send. After a stop string completes, returns
  // the text before it, matched() becomes true and every later push returns "".
  std::string push(std::string_view text);
  // Generation ended without a match: whatever was held back.
  std::string flush();
  bool matched() const { return matched_; }
  const std::string& word() const { return word_; }
  size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool matched_ = false;
  std::string word_;
};

// Splits a stream into reasoning and content. `start_in_reasoning`: the rendered prompt already opened the
// think block (templates that end the generation prompt with "<think>\n"). Otherwise a "<think>" at the very
// start of the output (after whitespace) opens it. A partial tag is held back until it resolves.
class ReasoningSplitter {
 public:
  ReasoningSplitter(bool enabled, bool start_in_reasoning, std::string open = "<think>",
                    std::string close = "</think>");
  struct Out {
    std::string reasoning;
    std::string content;
  };
  Out push(std::string_view text);
  Out flush();

 private:
  enum class State { Start, Reasoning, Content };
  bool enabled_;
  State state_;
  std::string open_, close_;
  std::string pending_;
  bool skip_newlines_ = false;  // the newlines right after </think> are the template's, not the answer's
};

// The longest suffix of `text` that is a proper prefix of `word` (0 when none).
size_t partial_suffix(std::string_view text, std::string_view word);

}  // namespace bloomery::server
