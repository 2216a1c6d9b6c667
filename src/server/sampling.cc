#include "server/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "runtime/sampler.h"

namespace bloomery::server {

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p,
                          std::span<const int32_t> recent, std::mt19937_64& rng) {
  const int64_t v = static_cast<int64_t>(logits.size());
  SampledToken out;

  // Raw log-softmax for the reported probabilities.
  float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x - mx));
  const double log_z = std::log(z) + mx;

  std::vector<float> l(logits.begin(), logits.end());
  for (auto [id, bias] : p.logit_bias)
    if (id >= 0 && id < v) l[id] += bias;
  if (!recent.empty() &&
      (p.repeat_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0)) {
    std::unordered_map<int32_t, int> count;
    for (int32_t t : recent) count[t]++;
    for (auto [id, c] : count) {
      if (id < 0 || id >= v) continue;
      float& x = l[id];
      if (p.repeat_penalty != 1.0) x = x > 0 ? x / p.repeat_penalty : x * p.repeat_penalty;
      x -= static_cast<float>(c * p.frequency_penalty + p.presence_penalty);
    }
  }

  // Truncation sees the temperature-1 distribution; the temperature applies last (llama-server's order:
  // penalties, top_k, top_p, min_p, temperature). Greedy takes the lowest id among equal maxima.
  const SamplerConfig cut{static_cast<float>(p.temperature), p.top_k, static_cast<float>(p.top_p),
                          static_cast<float>(p.min_p), 0};
  thread_local SampleScratch scratch;
  out.id = sample_filtered(l, cut, rng, scratch);
  out.logprob = static_cast<float>(logits[out.id] - log_z);

  if (p.n_probs > 0) {
    std::vector<int32_t> order(v);
    std::iota(order.begin(), order.end(), 0);
    size_t n = std::min<size_t>(p.n_probs, v);
    std::partial_sort(
        order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
        [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (size_t i = 0; i < n; ++i)
      out.top.push_back({order[i], static_cast<float>(logits[order[i]] - log_z)});
  }
  return out;
}

}  // namespace bloomery::server
