// UTF-8 validation and U+FFFD replacement (maximal subparts, as Python's errors="replace"), and the
// byte-level alphabet round trip.
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace bloomery {
namespace {

const std::string R = "\xEF\xBF\xBD";

TEST(Utf8, ReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::replace_invalid("ok"), "ok");
  EXPECT_EQ(utf8::replace_invalid("\xE3\x81\x82"), "\xE3\x81\x82");
  EXPECT_EQ(utf8::replace_invalid("\xE3\x81"), R);  // truncated: one replacement
  EXPECT_EQ(utf8::replace_invalid("\xE3\x81x"), R + "x");
  EXPECT_EQ(utf8::replace_invalid("\xC0\xAF"), R + R);          // overlong lead is never valid
  EXPECT_EQ(utf8::replace_invalid("\xED\xA0\x80"), R + R + R);  // surrogate
  EXPECT_EQ(utf8::replace_invalid("\xF4\x90\x80\x80"), R + R + R + R);
  EXPECT_EQ(utf8::replace_invalid("\xF0\x9F\x98"), R);
  EXPECT_EQ(utf8::replace_invalid("\x80\xBF"), R + R);
  EXPECT_FALSE(utf8::is_valid("\xE3\x81"));
  EXPECT_TRUE(utf8::is_valid("\xF0\x9F\x98\x80"));
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8::incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE3"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE3\x81"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE3\x81\x82"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("\xE3\x41"), 0u);  // broken, not incomplete
  EXPECT_EQ(utf8::incomplete_tail("\xFF"), 0u);
}

TEST(ByteLevel, AlphabetRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string spelled = byte_level::encode(all);
  EXPECT_EQ(byte_level::decode(spelled), all);
  EXPECT_EQ(byte_level::utf8_for_byte(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level::utf8_for_byte('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level::decode("a\nb"), std::nullopt);     // '\n' itself is not in the alphabet
}

}  // namespace
}  // namespace bloomery
