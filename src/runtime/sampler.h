// Token sampling from one row of logits: greedy, or temperature with top-k, top-p and min-p filters, from a
// seeded RNG so that a given seed reproduces the same tokens.
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

class Sampler {
 public:
  explicit Sampler(SamplerConfig config = {});
  int32_t sample(std::span<const float> logits);
  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
  std::vector<float> probs_;
};

// Argmax, lowest index on ties.
int32_t argmax(std::span<const float> logits);

}  // namespace bloomery
