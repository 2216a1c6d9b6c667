#include "tools/bench_grammar.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "server/grammar.h"
#include "server/json_schema.h"
#include "server/mask_bench.h"
#include "tokenizer/tokenizer.h"

namespace bloomery::tools {

static std::string read_text(const std::string& path, const char* flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) raise("E_BENCH_ARGS", Where{path, "", flag}, "a readable file", "cannot open it");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json bench_grammar_mask(const GrammarBenchArgs& a, const std::string& model_folder, double tg_ms) {
  if (!a.grammar_file.empty() && !a.schema_file.empty())
    raise("E_BENCH_ARGS", Where{"", "", "--grammar / --json-schema"}, "one of them", "both");
  const std::string dir = a.tokenizer_dir.empty() ? model_folder : a.tokenizer_dir;
  if (dir.empty())
    raise("E_BENCH_ARGS", Where{"", "", "--grammar-tokenizer"}, "a tokenizer folder (or -m <folder>)",
          "--synthetic without one");
  std::string gbnf, source;
  try {
    if (!a.grammar_file.empty()) {
      source = a.grammar_file;
      gbnf = read_text(a.grammar_file, "--grammar");
    } else {
      source = a.schema_file;
      auto schema = nlohmann::ordered_json::parse(read_text(a.schema_file, "--json-schema"));
      gbnf = server::schema_to_gbnf(schema);
    }
  } catch (const nlohmann::json::exception& e) {
    raise("E_BENCH_ARGS", Where{a.schema_file, "", "--json-schema"}, "a JSON schema", e.what());
  } catch (const server::GrammarError& e) {
    raise("E_BENCH_ARGS", Where{a.schema_file, "", "--json-schema"}, "a schema the grammar engine compiles",
          e.what());
  }
  std::shared_ptr<const server::Grammar> g;
  try {
    g = server::Grammar::parse(gbnf);
  } catch (const server::GrammarError& e) {
    raise("E_BENCH_ARGS", Where{a.grammar_file, "", "--grammar"}, "a GBNF grammar", e.what());
  }
  Tokenizer tok = Tokenizer::from_folder(dir);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  std::vector<bool> text(bytes.size());
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    text[static_cast<size_t>(id)] = !tok.is_special(id);
    if (text[static_cast<size_t>(id)]) bytes[static_cast<size_t>(id)] = tok.decode({&id, 1});
  }
  auto trie = std::make_shared<server::VocabTrie>(bytes, text);
  const double trie_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  server::MaskBenchOptions opt;
  opt.seeds = a.seeds;
  opt.max_steps = a.steps;
  const server::MaskBenchResult r = server::bench_masks(g, trie, bytes, text, opt);
  nlohmann::json j{{"grammar", source},
                   {"tokenizer", dir},
                   {"vocab", tok.vocab_size()},
                   {"trie_nodes", trie->size()},
                   {"trie_build_ms", trie_ms},
                   {"steps", r.steps},
                   {"generations", a.seeds},
                   {"finished", r.finished},
                   {"ms_per_step_mean", r.ms_mean},
                   {"first_visits", r.first_visits},
                   {"first_visit_ms_mean", r.first_ms_mean},
                   {"first_visit_ms_p95", r.first_ms_p95},
                   {"first_visit_ms_max", r.first_ms_max},
                   {"cached_visits", r.cached},
                   {"cached_ms_mean", r.cached_ms_mean},
                   {"apply_ms_mean", r.apply_ms_mean},
                   {"automaton_states", r.automaton_states},
                   {"errors", r.errors}};
  if (tg_ms > 0) {
    j["tg_ms_median"] = tg_ms;
    j["share_of_tg_step_mean"] = r.ms_mean / tg_ms;
    j["share_of_tg_step_first_visit_p95"] = r.first_ms_p95 / tg_ms;
  }
  if (!r.errors.empty())
    raise("E_GRAMMAR_MASK", Where{source, "", "--grammar"}, "masks the grammar accepts", r.errors.front());
  return j;
}

std::string grammar_mask_line(const nlohmann::json& r) {
  std::string s = fmt::format(
      "grammar mask ({}, vocabulary {} tokens, trie {} nodes built in {:.0f} ms): {} steps over {} random "
      "constrained generations; per step {:.3f} ms mean (mask + applying it to the logits); first visit of a "
      "state {} x {:.3f} ms mean, p95 {:.3f}, max {:.3f}; cached {} x {:.3f} ms; applying {:.3f} ms",
      r["grammar"].get<std::string>(), r["vocab"].get<int64_t>(), r["trie_nodes"].get<uint64_t>(),
      r["trie_build_ms"].get<double>(), r["steps"].get<uint64_t>(), r["generations"].get<int>(),
      r["ms_per_step_mean"].get<double>(), r["first_visits"].get<uint64_t>(),
      r["first_visit_ms_mean"].get<double>(), r["first_visit_ms_p95"].get<double>(),
      r["first_visit_ms_max"].get<double>(), r["cached_visits"].get<uint64_t>(),
      r["cached_ms_mean"].get<double>(), r["apply_ms_mean"].get<double>());
  if (r.contains("tg_ms_median"))
    s += fmt::format(
        "; {:.1f} % of this bench's first tg step ({:.3f} ms) on average, {:.1f} % at a p95 first visit",
        100 * r["share_of_tg_step_mean"].get<double>(), r["tg_ms_median"].get<double>(),
        100 * r["share_of_tg_step_first_visit_p95"].get<double>());
  return s + "\n";
}

}  // namespace bloomery::tools
