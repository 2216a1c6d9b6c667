// glm5_next MoE; follows transformers' Glm5NextTextTopkRouter (f32 sigmoid, bias for choice only) and
// experts.
#include "backend/cpu/glm_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "backend/cpu/cpu_family_ops.h"
#include "backend/cpu/qsa.h"

namespace bloomery::cpu {

bool glm_route_logits(const GlmRouterConfig& c, const float* logits, int* idx, float* w) {
  std::vector<float> s(logits, logits + c.E), choice(c.E);
  for (int e = 0; e < c.E; ++e) {
    s[e] = 1.0f / (1.0f + std::exp(-s[e]));
    choice[e] = s[e] + (c.bias ? c.bias[e] : 0.0f);
  }
  bool tie = false;
  if (c.n_group > 1) {
    // Keep the topk_group groups with the largest sum of their two best choice scores.
    const int per = c.E / c.n_group;
    std::vector<float> gscore(c.n_group);
    for (int g = 0; g < c.n_group; ++g) {
      std::vector<float> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::partial_sort(v.begin(), v.begin() + std::min(2, per), v.end(), std::greater<float>());
      gscore[g] = v[0] + (per > 1 ? v[1] : 0.0f);
    }
    bool gtie = false;
    const auto keep = stable_topk(gscore, c.topk_group, &gtie);
    tie = tie || gtie;
    std::vector<bool> kept(c.n_group, false);
    for (int64_t g : keep) kept[g] = true;
    for (int e = 0; e < c.E; ++e)
      if (!kept[e / per]) choice[e] = -INFINITY;
  }
  bool etie = false;
  const auto top = stable_topk(choice, c.top_k, &etie);
  tie = tie || etie;
  float sum = 0;
  for (int i = 0; i < c.top_k; ++i) {
    idx[i] = static_cast<int>(top[i]);
    w[i] = s[top[i]];
    sum += w[i];
  }
  for (int i = 0; i < c.top_k; ++i) {
    if (c.norm_topk_prob) w[i] /= (sum + 1e-20f);
    w[i] *= c.routed_scaling;
  }
  return tie;
}

}  // namespace bloomery::cpu

// ---- CpuFamilyOps overrides ----

namespace bloomery::cpu {

int64_t CpuFamilyOps::route_sigmoid_topk(Tensor& ids, Tensor& weights, const Tensor& logits,
                                         const Weight* bias, const SigmoidRouterSpec& spec) {
  const int64_t T = logits.rows(), E = logits.cols(), k = spec.top_k;
  if (ids.numel() != T * k || weights.numel() != T * k || (bias && bias->numel() != E) || k > E ||
      E % spec.n_group != 0)
    backend_shape_error("route_sigmoid_topk", "ids/weights [T, k], bias [E], E divisible by n_group",
                        ids.shape_str() + ", " + weights.shape_str() + ", " + logits.shape_str());
  GlmRouterConfig c;
  c.E = static_cast<int>(E);
  c.top_k = static_cast<int>(k);
  c.n_group = spec.n_group;
  c.topk_group = spec.topk_group;
  c.norm_topk_prob = spec.renormalize;
  c.routed_scaling = spec.routed_scaling;
  c.bias = bias ? bias->dense().f32() : nullptr;
  int64_t ties = 0;
  std::vector<int> idx(k);
  for (int64_t t = 0; t < T; ++t) {
    ties += glm_route_logits(c, logits.f32() + t * E, idx.data(), weights.f32() + t * k) ? 1 : 0;
    for (int64_t j = 0; j < k; ++j) ids.i32()[t * k + j] = idx[j];
  }
  return ties;
}

}  // namespace bloomery::cpu
