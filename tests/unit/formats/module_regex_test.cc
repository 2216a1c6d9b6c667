// ModuleRegex against CPython's re.match on the pattern forms of compressed-tensors configs, the refusals of
// what it does not support, and patterns that make backtracking engines take exponential time.
#include "formats/module_regex.h"

#include <chrono>
#include <string>

#include <gtest/gtest.h>

namespace bloomery {
namespace {

struct Case {
  const char* pattern;
  const char* name;
  bool match;
};

// Expected values are CPython 3.11's bool(re.match(pattern, name)).
const Case kCases[] = {
    {R"(.*mlp\.gate$)", "model.layers.0.mlp.gate", true},
    {R"(.*mlp\.gate$)", "model.layers.0.mlp.gate_proj", false},
    {R"(.*mlp\.gate$)", "mlp.gate\n", true},
    {R"(.*mlp\.gate$)", "x.mlp.gate.y", false},
    {R"(mlp\.shared)", "mlp.shared_expert", true},
    {R"(mlp\.shared)", "model.mlp.shared", false},
    {R"(model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj)",
     "model.layers.12.mlp.experts.511.down_proj", true},
    {R"(model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj)", "model.layers.x.mlp.experts.1.up_proj",
     false},
    {R"(model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj)", "model.layers.1.mlp.experts.1.o_proj",
     false},
    {R"((?:lm_head|embed_tokens)$)", "lm_head", true},
    {R"((?:lm_head|embed_tokens)$)", "embed_tokens", true},
    {R"((?:lm_head|embed_tokens)$)", "lm_head.weight", false},
    {R"((?P<pre>model)\.layers\.[0-3]\.)", "model.layers.3.self_attn", true},
    {R"((?P<pre>model)\.layers\.[0-3]\.)", "model.layers.4.self_attn", false},
    {R"([^.]+\.norm)", "model.norm", true},
    {R"([^.]+\.norm)", "a.b.norm", false},
    {R"([^.]+\.norm)", "norm", false},
    {R"(a{2,3}b)", "aab", true},
    {R"(a{2,3}b)", "aaab", true},
    {R"(a{2,3}b)", "ab", false},
    {R"(a{2,3}b)", "aaaab", false},
    {R"(a{2})", "aa", true},
    {R"(a{2})", "a", false},
    {R"(a{,2}b)", "b", true},
    {R"(a{,2}b)", "aab", true},
    {R"(a{,2}b)", "aaab", false},
    {R"(x{})", "x{}", true},
    {R"(x{})", "x", false},
    {R"(x{a})", "x{a}", true},
    {R"(x{a})", "x", false},
    {R"(\bfoo\b)", "foo.bar", true},
    {R"(\bfoo\b)", "foobar", false},
    {R"(.*\Bar)", "bar", true},
    {R"(.*\Bar)", "xbar", true},
    {R"(\Amodel\Z)", "model", true},
    {R"(\Amodel\Z)", "model\n", false},
    {R"([\w.]+_proj$)", "q_proj", true},
    {R"([\w.]+_proj$)", "self_attn.k_proj", true},
    {R"([\w.]+_proj$)", "a-b_proj", false},
    {R"([a\-z])", "-", true},
    {R"([a\-z])", "b", false},
    {R"([]a])", "]", true},
    {R"([]a])", "a", true},
    {R"([]a])", "b", false},
    {R"([a-])", "-", true},
    {R"([a-])", "a", true},
    {R"((a*)*b)", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaac", false},
    {R"((a*)*b)", "aaab", true},
    {R"((a|aa)+$)", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", false},
    {R"((a|aa)+$)", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", true},
    {R"()", "", true},
    {R"()", "anything", true},
    {R"(a|)", "b", true},
    {R"(\x41\.)", "A.", true},
    {R"(\x41\.)", "A", false},
    {R"(a*?b)", "aab", true},
    {R"(a++b)", "aab", true},
    {R"((?#comment)ab)", "ab", true},
    {R"(\s\S\d\D\W)", "\t.1x-", true},
    {R"(\s\S\d\D\W)", " a1x_", false},
};

TEST(ModuleRegex, AgreesWithPythonReMatch) {
  for (const Case& c : kCases) {
    ModuleRegex re = ModuleRegex::compile(c.pattern);
    EXPECT_EQ(re.match_prefix(c.name), c.match) << "pattern '" << c.pattern << "' name '" << c.name << "'";
  }
}

TEST(ModuleRegex, RefusesWhatItDoesNotSupportOrWhatIsMalformed) {
  for (const char* bad : {"(unclosed", "a)", "*a", "a**", "a{3,2}", "(?=a)", "(?!a)", "(?<=a)b", "(?i)a",
                          "(a)\\1", "[z-a]", "[abc", "\\q", "a{1001}", "(?P=n)", "\\x4", "a\\"}) {
    EXPECT_THROW(ModuleRegex::compile(bad), ModuleRegexError) << bad;
  }
}

TEST(ModuleRegex, ErrorNamesWhatAndWhere) {
  try {
    ModuleRegex::compile("ab(?=c)");
    FAIL() << "lookahead accepted";
  } catch (const ModuleRegexError& e) {
    EXPECT_NE(std::string(e.what()).find("lookaround"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("position 4"), std::string::npos) << e.what();
  }
}

TEST(ModuleRegex, ExpandedRepeatsAreBounded) {
  // 1000 copies of 1000 copies would be a million states: refused at compile time, not built.
  EXPECT_THROW(ModuleRegex::compile("(a{1000}){1000}"), ModuleRegexError);
  ModuleRegex ok = ModuleRegex::compile("a{3,5}");
  EXPECT_LE(ok.program_size(), 16u);
}

TEST(ModuleRegex, PathologicalPatternsMatchInLinearTime) {
  // Each of these takes exponential time in a backtracking engine on a long run of 'a' with no match.
  const std::string name = std::string(4000, 'a') + "!";
  const auto start = std::chrono::steady_clock::now();
  for (const char* p : {"(a*)*b", "(a|aa)+$", "(a|a)*b", "((a+)+)+b", "(a?){30}a{30}b", "(.*a){20}b"}) {
    EXPECT_FALSE(ModuleRegex::compile(p).match_prefix(name)) << p;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Linear time is milliseconds here; a backtracking engine would not finish at all.
  EXPECT_LT(seconds, 10.0);
}

}  // namespace
}  // namespace bloomery
