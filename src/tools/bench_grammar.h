// `bloomery bench --grammar FILE | --json-schema FILE`: the constrained-decoding mask's cost per decode step
// over a tokenizer's whole vocabulary (server/mask_bench.h), set against the bench's decode step.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace bloomery::tools {

struct GrammarBenchArgs {
  std::string grammar_file;    // GBNF
  std::string schema_file;     // a JSON schema, compiled to GBNF as the server does
  std::string tokenizer_dir;   // the folder with tokenizer.json (default: the model folder)
  int seeds = 8, steps = 400;  // random constrained generations, steps each at most
  bool wanted() const { return !grammar_file.empty() || !schema_file.empty(); }
};

// Measures and returns the numbers as JSON; `tg_ms` (0: none) is the decode step the share is taken of.
nlohmann::json bench_grammar_mask(const GrammarBenchArgs& a, const std::string& model_folder, double tg_ms);
// One line for the table output.
std::string grammar_mask_line(const nlohmann::json& r);

}  // namespace bloomery::tools
