#include "server/text_filter.h"

#include <gtest/gtest.h>

using namespace bloomery::server;

namespace {
// Feeds `pieces` one by one; returns everything emitted (pushes then flush).
std::string run_stop(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                     bool* matched = nullptr, std::vector<std::string>* emitted = nullptr) {
  StopMatcher m(stops);
  std::string out;
  for (const auto& p : pieces) {
    std::string e = m.push(p);
    if (emitted) emitted->push_back(e);
    out += e;
  }
  out += m.flush();
  if (matched) *matched = m.matched();
  return out;
}
}  // namespace

TEST(StopMatcher, NoStopsPassesThrough) {
  bool matched = true;
  EXPECT_EQ(run_stop({}, {"a", "b", "c"}, &matched), "abc");
  EXPECT_FALSE(matched);
}

TEST(StopMatcher, StopSplitAcrossPiecesIsNeverEmittedPartly) {
  bool matched = false;
  std::vector<std::string> emitted;
  EXPECT_EQ(run_stop({"STOP"}, {"hello S", "T", "O", "P world"}, &matched, &emitted), "hello ");
  EXPECT_TRUE(matched);
  // The "S" was held back from the first piece, and nothing of the stop string came out later.
  EXPECT_EQ(emitted[0], "hello ");
  EXPECT_EQ(emitted[1], "");
  EXPECT_EQ(emitted[2], "");
  EXPECT_EQ(emitted[3], "");
}

TEST(StopMatcher, FalseStartIsReleased) {
  bool matched = true;
  std::vector<std::string> emitted;
  EXPECT_EQ(run_stop({"STOP"}, {"ST", "ART"}, &matched, &emitted), "START");
  EXPECT_FALSE(matched);
  EXPECT_EQ(emitted[0], "");  // "ST" could begin "STOP"
  EXPECT_EQ(emitted[1], "START");
}

TEST(StopMatcher, HeldTailFlushedAtEnd) {
  EXPECT_EQ(run_stop({"STOP"}, {"abc ST"}), "abc ST");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(m.push("hello world"), "hel");
  EXPECT_EQ(m.word(), "lo w");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, OverlappingPrefixes) {
  // "aab": after "aa" the tail "aa" could still start "aab"; the longest partial suffix is held.
  bool matched = false;
  EXPECT_EQ(run_stop({"aab"}, {"xa", "a", "a", "b"}, &matched), "xa");
  EXPECT_TRUE(matched);
}

TEST(StopMatcher, PartialSuffix) {
  EXPECT_EQ(partial_suffix("hello wo", "world"), 2u);
  EXPECT_EQ(partial_suffix("hello", "world"), 0u);
  EXPECT_EQ(partial_suffix("world", "world"), 0u);  // a whole match is not a partial one
}

TEST(Reasoning, ThinkBlockAtStartGoesToReasoning) {
  ReasoningSplitter r(true, false);
  std::string reasoning, content;
  for (const char* p : {"<th", "ink>let me ", "think</th", "ink>\n\nThe answer", " is 4"}) {
    auto o = r.push(p);
    reasoning += o.reasoning;
    content += o.content;
  }
  auto o = r.flush();
  reasoning += o.reasoning;
  content += o.content;
  EXPECT_EQ(reasoning, "let me think");
  EXPECT_EQ(content, "The answer is 4");
}

TEST(Reasoning, PromptOpenedThinkBlock) {
  ReasoningSplitter r(true, true);
  auto a = r.push("hmm</think>");
  auto b = r.push("\n\nok");
  EXPECT_EQ(a.reasoning, "hmm");
  EXPECT_EQ(a.content + b.content, "ok");
}

TEST(Reasoning, NoThinkTagMeansContent) {
  ReasoningSplitter r(true, false);
  auto a = r.push("  <b>bold</b>");
  EXPECT_EQ(a.content, "  <b>bold</b>");
  EXPECT_EQ(a.reasoning, "");
  ReasoningSplitter off(false, false);
  EXPECT_EQ(off.push("<think>x</think>y").content, "<think>x</think>y");
}

TEST(Reasoning, UnclosedThinkIsReasoningAtEnd) {
  ReasoningSplitter r(true, false);
  auto a = r.push("<think>still going </th");
  auto b = r.flush();
  EXPECT_EQ(a.reasoning + b.reasoning, "still going </th");
}
