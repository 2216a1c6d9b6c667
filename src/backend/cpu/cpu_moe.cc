// Softmax top-k router with renormalisation, and routed SwiGLU experts (weighted sum per token).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace bloomery::cpu {

void CpuBackend::route_softmax_topk(Tensor& ids, Tensor& weights, const Tensor& logits, const RouterSpec& r) {
  const int64_t T = logits.rows(), E = logits.cols(), k = r.top_k;
  BLOOMERY_NEED(k >= 1 && k <= E, "route_softmax_topk", "1 <= top_k <= " + std::to_string(E),
                std::to_string(k));
  BLOOMERY_NEED(ids.type() == ElemType::I32 && ids.numel() == T * k && weights.numel() == T * k,
                "route_softmax_topk",
                "ids (I32) and weights of [" + std::to_string(T) + ", " + std::to_string(k) + "]",
                ids.shape_str() + " " + weights.shape_str());
  std::vector<float> p(E);
  std::vector<int64_t> order(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.f32() + t * E;
    const float mx = *std::max_element(l, l + E);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    float tot = 0.0f;
    for (int64_t j = 0; j < k; ++j) tot += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      ids.i32()[t * k + j] = static_cast<int32_t>(order[j]);
      weights.f32()[t * k + j] = r.renormalize ? p[order[j]] / tot : p[order[j]];
    }
  }
}

void CpuBackend::moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                             std::span<const ExpertWeights> experts, float swiglu_limit) {
  const int64_t T = x.rows(), D = x.cols(), k = ids.cols();
  BLOOMERY_NEED(
      ids.type() == ElemType::I32 && ids.rows() == T && weights.numel() == T * k && out.numel() == T * D,
      "moe_experts", "ids/weights [T, k], out [T, D]", ids.shape_str() + " " + out.shape_str());
  for (int64_t i = 0; i < T * k; ++i) {
    const int32_t e = ids.i32()[i];
    BLOOMERY_NEED(e >= 0 && e < static_cast<int64_t>(experts.size()) && experts[e].gate && experts[e].up &&
                      experts[e].down,
                  "moe_experts", "a loaded expert below " + std::to_string(experts.size()),
                  std::to_string(e));
  }
  const int64_t I = experts[ids.i32()[0]].gate->rows();
  // Each (token, slot) pair computes its expert's output into its own row; rows are summed in slot order
  // after, so the result does not depend on the thread count.
  // Pairs are visited grouped by expert (stable within one), so the pairs that share an expert run back to
  // back and find its weights in cache; each still writes only its own row.
  std::vector<float> partial(static_cast<size_t>(T * k * D));
  std::vector<int64_t> by_expert(static_cast<size_t>(T * k));
  std::iota(by_expert.begin(), by_expert.end(), 0);
  std::stable_sort(by_expert.begin(), by_expert.end(),
                   [&](int64_t a, int64_t b) { return ids.i32()[a] < ids.i32()[b]; });
  const float* X = x.f32();
  owned_pool_->parallel_for(T * k, [&](int64_t i0, int64_t i1) {
    std::vector<float> g(I), u(I);
    for (int64_t at = i0; at < i1; ++at) {
      const int64_t i = by_expert[at], t = i / k;
      const ExpertWeights& ew = experts[ids.i32()[i]];
      BLOOMERY_NEED(
          ew.gate->rows() == I && ew.gate->cols() == D && ew.down->rows() == D && ew.down->cols() == I,
          "moe_experts", "experts of equal shape", ew.gate->name());
      dot_rows(X + t * D, ew.gate->dense().f32(), D, 0, I, g.data());
      dot_rows(X + t * D, ew.up->dense().f32(), D, 0, I, u.data());
      for (int64_t j = 0; j < I; ++j) {
        float gv = g[j], uv = u[j];
        if (swiglu_limit > 0.0f) {
          gv = std::min(gv, swiglu_limit);
          uv = std::clamp(uv, -swiglu_limit, swiglu_limit);
        }
        g[j] = act_apply(Act::Silu, gv) * uv;
      }
      float* pr = partial.data() + i * D;
      dot_rows(g.data(), ew.down->dense().f32(), I, 0, D, pr);
      const float w = weights.f32()[i];
      for (int64_t c = 0; c < D; ++c) pr[c] *= w;
    }
  });
  float* O = out.f32();
  for (int64_t t = 0; t < T; ++t) {
    float* o = O + t * D;
    std::fill(o, o + D, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float* pr = partial.data() + (t * k + j) * D;
      for (int64_t c = 0; c < D; ++c) o[c] += pr[c];
    }
  }
}

}  // namespace bloomery::cpu
