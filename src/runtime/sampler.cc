// Sampler: filters in the llama.cpp order top-k → top-p → min-p on the temperature-1 softmax, then the
// temperature on the survivors.
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

int32_t sample_filtered(std::span<const float> logits, const SamplerConfig& c, std::mt19937_64& rng,
                        SampleScratch& scratch) {
  if (c.temperature <= 0.0f || c.top_k == 1) return argmax(logits);
  std::vector<int32_t>& order = scratch.order;
  std::vector<double>& probs = scratch.probs;
  const size_t V = logits.size();
  order.resize(V);
  std::iota(order.begin(), order.end(), 0);
  size_t keep = c.top_k > 0 ? std::min<size_t>(V, static_cast<size_t>(c.top_k)) : V;
  // Descending by logit, lower id first on ties, so the candidate order never depends on the sort's whims.
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (keep < V) {
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  // The cuts see the temperature-1 distribution of the top-k candidates.
  probs.resize(keep);
  const double top = logits[order[0]];
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(static_cast<double>(logits[order[i]]) - top);
  for (size_t i = 0; i < keep; ++i) probs[i] /= sum;
  if (c.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += probs[n++];
      if (cum >= c.top_p) break;
    }
    keep = std::max<size_t>(1, n);
  }
  if (c.min_p > 0.0f) {
    const double floor = c.min_p * probs[0];
    size_t n = 1;
    while (n < keep && probs[n] >= floor) ++n;
    keep = n;
  }
  // Temperature last, on the survivors.
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i)
    total += probs[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / c.temperature);
  // A uniform draw from the raw 64-bit stream (not std::uniform_real_distribution, whose algorithm differs
  // between standard libraries), so a seed gives the same tokens everywhere.
  const double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0) * total;
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += probs[i];
    if (u < cum) return order[i];
  }
  return order[keep - 1];
}

}  // namespace bloomery
