// Jinja parser: what it refuses at load, and where it says the problem is.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/jinja_parser.h"

namespace bloomery::jinja {
namespace {

// Parses src and returns the error id and message ("" when it parses).
std::pair<std::string, std::string> refusal(const std::string& src) {
  try {
    parse_template(src, "t.jinja");
  } catch (const Error& e) {
    return {e.id(), e.what()};
  }
  return {"", ""};
}

TEST(JinjaParser, AcceptsTheChatTemplateSubset) {
  const char* ok[] = {
      "{% for a, b in x.items() if a %}{{ loop.index }}{% else %}e{% endfor %}",
      "{% if a %}1{% elif b %}2{% else %}3{% endif %}",
      "{% set ns = namespace(a=1) %}{% set ns.a = 2 %}{% set x, y = 1, 2 %}",
      "{% macro m(a, b=1) %}{{ a ~ b }}{% endmacro %}{{ m(1, b=2) }}",
      "{% set s %}x{% endset %}{% filter upper %}y{% endfilter %}{% with a = 1 %}{{ a }}{% endwith %}",
      "{{ x | tojson(indent=2) | safe }}{{ x is not none and x is string }}{{ x[1:-1:2] }}{{ 'a' if b else "
      "'c' }}",
      "{% for x in y %}{% if x %}{% break %}{% endif %}{% continue %}{% endfor %}",
      "{% generation %}g{% endgeneration %}{{ raise_exception('m') }}{{ strftime_now('%Y') }}",
  };
  for (const char* src : ok) EXPECT_EQ(refusal(src).first, "") << src << ": " << refusal(src).second;
}

TEST(JinjaParser, RefusesUnsupportedConstructsWithPosition) {
  struct Case {
    const char* src;
    const char* where;
  };
  const Case cases[] = {
      {"{% extends 'base' %}", "t.jinja:1:4"},
      {"ok\n{% include 'x' %}", "t.jinja:2:4"},
      {"{{ x | wordwrap }}", "t.jinja:1:8"},
      {"{{ x is divisible }}", "t.jinja:1:9"},
      {"{{ x.format(1) }}", "t.jinja:1:5"},
      {"{{ cycler(1, 2) }}", "t.jinja:1:4"},
      {"{% for x in y recursive %}{% endfor %}", "t.jinja:1:15"},
      {"{% macro m() %}{{ varargs }}{% endmacro %}", "t.jinja:1:19"},
      {"{{ f(*args) }}", "t.jinja:1:6"},
      {"{% call m() %}{% endcall %}", "t.jinja:1:4"},
  };
  for (const auto& c : cases) {
    auto [id, msg] = refusal(c.src);
    EXPECT_EQ(id, "E_TPL_UNSUPPORTED") << c.src << ": " << msg;
    EXPECT_NE(msg.find(c.where), std::string::npos) << c.src << ": " << msg;
  }
}

TEST(JinjaParser, SyntaxErrorsNameTheirPosition) {
  struct Case {
    const char* src;
    const char* where;
  };
  const Case cases[] = {
      {"{% if x %}never closed", "t.jinja:1:23"},
      {"{% endfor %}", "t.jinja:1:4"},
      {"{% frobnicate %}", "t.jinja:1:4"},
      {"{{ 1 + }}", "t.jinja:1:8"},
      {"{% set true = 1 %}", "t.jinja:1:8"},
      {"{% break %}", "t.jinja:1:4"},
      {"{% macro m(a=1, b) %}{% endmacro %}", "t.jinja:1:18"},
      {"{{ f(a=1, 2) }}", "t.jinja:1:11"},
  };
  for (const auto& c : cases) {
    auto [id, msg] = refusal(c.src);
    EXPECT_EQ(id, "E_TPL_SYNTAX") << c.src << ": " << msg;
    EXPECT_NE(msg.find(c.where), std::string::npos) << c.src << ": " << msg;
  }
}

}  // namespace
}  // namespace bloomery::jinja
