#include "server/mask_bench.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>

namespace bloomery::server {

using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

MaskBenchResult bench_masks(std::shared_ptr<const Grammar> g, std::shared_ptr<const VocabTrie> trie,
                            const std::vector<std::string>& token_bytes, const std::vector<bool>& is_text,
                            const MaskBenchOptions& opt) {
  MaskBenchResult r;
  TokenMasker m(g, trie);
  std::vector<double> first;
  double total = 0, cached = 0, apply = 0;
  std::vector<float> logits(token_bytes.size());
  const std::vector<int32_t> no_eos;
  for (int seed = 0; seed < opt.seeds; ++seed) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    Grammar::State s = g->initial();
    std::string out;
    for (int step = 0; step < opt.max_steps; ++step) {
      std::fill(logits.begin(), logits.end(), 1.0f);
      const uint64_t misses = m.cache_misses();
      const auto t0 = Clock::now();
      const TokenMask& mask = m.mask(s);
      const auto t1 = Clock::now();
      apply_mask(mask, g->accepting(s), no_eos, logits);
      const double a = ms_since(t1);
      const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count() + a;
      total += ms;
      apply += a;
      if (m.cache_misses() > misses) {
        first.push_back(ms);
      } else {
        cached += ms;
        r.cached++;
      }
      r.steps++;
      std::vector<int32_t> ok;
      for (size_t i = 0; i < token_bytes.size(); ++i)
        if (mask[i]) ok.push_back(static_cast<int32_t>(i));
      if (opt.check_every > 0 && step % opt.check_every == 0) {
        // The reference: each token's bytes fed to a copy of the state, one token at a time.
        r.checked++;
        for (size_t i = 0; i < token_bytes.size(); ++i) {
          Grammar::State t = s;
          const bool want = is_text[i] && !token_bytes[i].empty() && g->advance(t, token_bytes[i]);
          if (want != mask[i]) {
            r.errors.push_back(fmt::format("seed {} step {}: token {} is {} by the mask, {} by the grammar",
                                           seed, step, i, mask[i] ? "allowed" : "refused",
                                           want ? "allowed" : "refused"));
            break;
          }
        }
      }
      if (ok.empty()) break;
      // Random allowed tokens, with a pull towards short ones late so that documents close.
      int32_t pick = ok[rng() % ok.size()];
      if (step > 40)
        for (int k = 0; k < 8; ++k) {
          const int32_t o = ok[rng() % ok.size()];
          if (token_bytes[static_cast<size_t>(o)].size() < token_bytes[static_cast<size_t>(pick)].size())
            pick = o;
        }
      if (!g->advance(s, token_bytes[static_cast<size_t>(pick)])) {
        r.errors.push_back(
            fmt::format("seed {} step {}: masked-in token {} refused by the grammar", seed, step, pick));
        break;
      }
      out += token_bytes[static_cast<size_t>(pick)];
      if (g->finished(s) || (g->accepting(s) && rng() % 3 == 0)) break;
    }
    if (g->accepting(s)) {
      r.finished++;
      r.documents.push_back(out);
    }
  }
  r.first_visits = first.size();
  r.ms_mean = r.steps ? total / static_cast<double>(r.steps) : 0.0;
  r.apply_ms_mean = r.steps ? apply / static_cast<double>(r.steps) : 0.0;
  r.cached_ms_mean = r.cached ? cached / static_cast<double>(r.cached) : 0.0;
  if (!first.empty()) {
    double sum = 0;
    for (double v : first) sum += v;
    r.first_ms_mean = sum / static_cast<double>(first.size());
    std::sort(first.begin(), first.end());
    r.first_ms_p95 = first[std::min(first.size() - 1, first.size() * 95 / 100)];
    r.first_ms_max = first.back();
  }
  r.automaton_states = m.automaton_states();
  return r;
}

}  // namespace bloomery::server
