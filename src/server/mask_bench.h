// The grammar mask's cost per decode step, measured the way the scheduler pays it: along random constrained
// generations (a random allowed token each step), each step asks the masker for the state's mask and applies
// it to a row of logits the size of the vocabulary. Shared by `bloomery bench --grammar` and the
// grammar_mask_bench test over the real Qwen3 vocabulary, which also checks every masked-in token and, when
// asked, compares masks with the token-by-token check.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/grammar.h"

namespace bloomery::server {

struct MaskBenchOptions {
  int seeds = 8;
  int max_steps = 400;
  int check_every = 0;  // > 0: every n-th step's mask is compared with the token-by-token check
};

struct MaskBenchResult {
  uint64_t steps = 0, first_visits = 0, cached = 0, finished = 0, checked = 0;
  double ms_mean = 0;  // per step: mask (walk or cache lookup) + applying it to the logits
  double first_ms_mean = 0, first_ms_p95 = 0, first_ms_max = 0;
  double cached_ms_mean = 0;
  double apply_ms_mean = 0;  // of which applying the mask to one row of logits
  size_t automaton_states = 0;
  std::vector<std::string> documents;  // the text of each generation that ended accepted
  std::vector<std::string> errors;     // a masked-in token the grammar refused, a mask that differs
};

// `token_bytes` / `is_text`: the vocabulary as VocabTrie takes it; `trie` built from them.
MaskBenchResult bench_masks(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie,
                            const std::vector<std::string>& token_bytes, const std::vector<bool>& is_text,
                            const MaskBenchOptions& opt);

}  // namespace bloomery::server
