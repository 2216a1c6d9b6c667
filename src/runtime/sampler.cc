// Sampler: filters are applied in the llama.cpp order top-k → top-p → min-p on the temperature-scaled
// softmax.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace bloomery {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  if (config_.temperature <= 0.0f || config_.top_k == 1) return argmax(logits);
  const size_t V = logits.size();
  order_.resize(V);
  std::iota(order_.begin(), order_.end(), 0);
  // Descending by logit, lower id first on ties, so the candidate order never depends on the sort's whims.
  std::stable_sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = V;
  if (config_.top_k > 0) keep = std::min<size_t>(keep, config_.top_k);
  probs_.resize(keep);
  const float mx = logits[order_[0]];
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i)
    sum += (probs_[i] = std::exp((logits[order_[i]] - mx) / config_.temperature));
  for (size_t i = 0; i < keep; ++i) probs_[i] = static_cast<float>(probs_[i] / sum);
  if (config_.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += probs_[n++];
      if (cum >= config_.top_p) break;
    }
    keep = std::max<size_t>(1, n);
  }
  if (config_.min_p > 0.0f) {
    const float floor = config_.min_p * probs_[0];
    size_t n = 1;
    while (n < keep && probs_[n] >= floor) ++n;
    keep = n;
  }
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += probs_[i];
  // A uniform draw from the raw 64-bit stream (not std::uniform_real_distribution, whose algorithm differs
  // between standard libraries), so a seed gives the same tokens everywhere.
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * total;
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += probs_[i];
    if (u < cum) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace bloomery
