// bloomery bench --grammar / --json-schema: the mask bench over a fixture's tokenizer reports its steps,
// first and cached visits and the share of the given decode step, finds no wrong mask, and refuses bad
// arguments naming the flag.
#include "tools/bench_grammar.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace bloomery::tools {
namespace {

const std::string kSrc = BLOOMERY_SOURCE_DIR;
const std::string kTok = kSrc + "/tests/fixtures/models/qwen3_next-bf16";

TEST(BenchGrammar, MeasuresFirstAndCachedVisitsAgainstTheStep) {
  GrammarBenchArgs a;
  a.grammar_file = kSrc + "/bench/grammars/json_object.gbnf";
  a.seeds = 3;
  a.steps = 60;
  const nlohmann::json r = bench_grammar_mask(a, kTok, 10.0);
  EXPECT_GT(r["vocab"].get<int64_t>(), 256);
  EXPECT_GT(r["steps"].get<uint64_t>(), 3u);
  EXPECT_GT(r["first_visits"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["first_visits"].get<uint64_t>() + r["cached_visits"].get<uint64_t>(),
            r["steps"].get<uint64_t>());
  EXPECT_TRUE(r["errors"].empty());
  EXPECT_NEAR(r["share_of_tg_step_mean"].get<double>(), r["ms_per_step_mean"].get<double>() / 10.0, 1e-12);
  EXPECT_NE(grammar_mask_line(r).find("first visit of a state"), std::string::npos);

  GrammarBenchArgs s;
  s.schema_file = kSrc + "/bench/grammars/record.schema.json";
  s.tokenizer_dir = kTok;
  s.seeds = 2;
  const nlohmann::json rs = bench_grammar_mask(s, "", 0);
  EXPECT_GT(rs["steps"].get<uint64_t>(), 3u);
  EXPECT_FALSE(rs.contains("share_of_tg_step_mean"));  // no tg row to compare with
}

TEST(BenchGrammar, BadArgumentsNameTheFlag) {
  auto msg = [](const GrammarBenchArgs& a, const std::string& folder) {
    try {
      bench_grammar_mask(a, folder, 0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("ran");
  };
  GrammarBenchArgs both;
  both.grammar_file = kSrc + "/bench/grammars/json_object.gbnf";
  both.schema_file = kSrc + "/bench/grammars/record.schema.json";
  EXPECT_NE(msg(both, kTok).find("--grammar / --json-schema"), std::string::npos);
  GrammarBenchArgs no_tok;
  no_tok.grammar_file = both.grammar_file;
  EXPECT_NE(msg(no_tok, "").find("--grammar-tokenizer"), std::string::npos);
  GrammarBenchArgs bad;
  bad.grammar_file = kSrc + "/bench/grammars/record.schema.json";  // JSON is no GBNF
  EXPECT_NE(msg(bad, kTok).find("--grammar"), std::string::npos);
  GrammarBenchArgs missing;
  missing.schema_file = "/nonexistent/schema.json";
  EXPECT_NE(msg(missing, kTok).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace bloomery::tools
