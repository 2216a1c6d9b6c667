// Token sampling from one row of logits: greedy, or top-k, top-p and min-p filters then temperature
// (llama-server's order), from a seeded RNG so that a given seed reproduces the same tokens. The server's
// sampler (server/sampling.cc) adds bias and penalties and then draws through sample_filtered.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace bloomery {

struct SamplerConfig {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off (keep tokens with p >= min_p · p_max)
  uint64_t seed = 0;
};

// Scratch of sample_filtered, kept between calls to avoid a vocabulary-sized allocation per token.
struct SampleScratch {
  std::vector<int32_t> order;
  std::vector<double> probs;
};

// One token from `logits` (config.seed unused): temperature <= 0 or top_k == 1 is the argmax (lowest id on
// ties); otherwise top-k, top-p and min-p cut the temperature-1 softmax (candidates by descending logit,
// lower id first on ties), the temperature reshapes the survivors, and the draw takes the raw 64-bit stream
// of `rng` (not std::*_distribution, whose algorithms differ between standard libraries).
int32_t sample_filtered(std::span<const float> logits, const SamplerConfig& config, std::mt19937_64& rng,
                        SampleScratch& scratch);

class Sampler {
 public:
  explicit Sampler(SamplerConfig config = {});
  int32_t sample(std::span<const float> logits) { return sample_filtered(logits, config_, rng_, scratch_); }
  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
  SampleScratch scratch_;
};

// Argmax, lowest index on ties.
int32_t argmax(std::span<const float> logits);

}  // namespace bloomery
