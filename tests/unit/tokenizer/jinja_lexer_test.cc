// Jinja lexer: token kinds, literals, positions and Jinja2's whitespace rules.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/jinja_lexer.h"

namespace bloomery::jinja {
namespace {

std::string data_of(const std::vector<Token>& toks) {
  std::string s;
  for (const auto& t : toks)
    if (t.type == Tok::Data) s += t.text;
  return s;
}

TEST(JinjaLexer, TrimBlocksDropsOneNewlineAfterABlockTag) {
  EXPECT_EQ(data_of(lex("a\n{% if x %}\nb\n{% endif %}\nc", "t")), "a\nb\nc");
  // but not after a variable tag
  EXPECT_EQ(data_of(lex("{{ x }}\nb", "t")), "\nb");
}

TEST(JinjaLexer, LstripBlocksOnlyAtLineStart) {
  EXPECT_EQ(data_of(lex("x\n   {% if y %}z{% endif %}", "t")), "x\nz");
  EXPECT_EQ(data_of(lex("x   {% if y %}z{% endif %}", "t")), "x   z");
  EXPECT_EQ(data_of(lex("x\n   {%+ if y %}z{% endif %}", "t")), "x\n   z");
}

TEST(JinjaLexer, MinusStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(data_of(lex("a \n\t {%- if x -%} \n b{% endif %}", "t")), "ab");
  EXPECT_EQ(data_of(lex("a  {{- x -}}  b", "t")), "ab");
}

TEST(JinjaLexer, NewlinesNormalisedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(data_of(lex("a\r\nb\rc\n", "t")), "a\nb\nc");
  EXPECT_EQ(data_of(lex("a\n\n", "t")), "a\n");
}

TEST(JinjaLexer, CommentsAndRawBlocks) {
  EXPECT_EQ(data_of(lex("a{# {{ no }} #}b", "t")), "ab");
  EXPECT_EQ(data_of(lex("{% raw %}{{ x }}{% endraw %}", "t")), "{{ x }}");
}

TEST(JinjaLexer, Literals) {
  auto toks = lex("{{ 'a\\n\\u00e9' 0x1F 1_000 2.5e3 \"q\" }}", "t");
  ASSERT_GE(toks.size(), 7u);
  EXPECT_EQ(toks[1].type, Tok::String);
  EXPECT_EQ(toks[1].text, "a\n\xC3\xA9");
  EXPECT_EQ(toks[2].ival, 31);
  EXPECT_EQ(toks[3].ival, 1000);
  EXPECT_DOUBLE_EQ(toks[4].fval, 2500.0);
  EXPECT_EQ(toks[5].text, "q");
}

TEST(JinjaLexer, PositionsAreLineAndColumn) {
  auto toks = lex("ab\n  {{ name }}", "t");
  const Token& name = toks[2];
  EXPECT_EQ(name.type, Tok::Name);
  EXPECT_EQ(name.line, 2);
  EXPECT_EQ(name.col, 6);
}

TEST(JinjaLexer, UnclosedTagsAreSyntaxErrorsWithPosition) {
  try {
    lex("line1\n  {{ x ", "tpl.jinja");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TPL_SYNTAX");
    EXPECT_NE(std::string(e.what()).find("tpl.jinja:2:3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lex("{# never closed", "t"), Error);
  EXPECT_THROW(lex("{{ (1 }}", "t"), Error);
  EXPECT_THROW(lex("{{ 'open }}", "t"), Error);
}

}  // namespace
}  // namespace bloomery::jinja
