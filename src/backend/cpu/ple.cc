// qwen4_exp PLE: follows transformers' Qwen4ExpTextNGramEmbedding / Qwen4ExpTextPLELayer, f32 math.
#include "backend/cpu/ple.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/hyper_connections.h"

namespace bloomery::cpu {

namespace {
void matvec(const float* W, const float* x, int out, int in, float* y) {
  for (int o = 0; o < out; ++o) {
    const float* row = W + static_cast<int64_t>(o) * in;
    double acc = 0;
    for (int i = 0; i < in; ++i) acc += static_cast<double>(row[i]) * x[i];
    y[o] = static_cast<float>(acc);
  }
}
}  // namespace

PleConvState ple_conv_start(const PleWeights& w) {
  return PleConvState{std::vector<float>(static_cast<size_t>((w.K - 1) * w.dilation) * w.n * w.D, 0.0f)};
}

void ple_forward_token(const PleWeights& w, const float* e, const float* X, PleConvState& conv, float* out) {
  const int n = w.n, D = w.D, nD = n * D;
  std::vector<float> key(nD), kn(nD), value(D), qn(nD), G(nD), Gn(nD);
  matvec(w.key_proj, e, nD, w.E, key.data());
  grouped_rmsnorm1p(key.data(), w.norm_key, n, D, w.eps, kn.data());
  matvec(w.value_proj, e, D, w.E, value.data());
  grouped_rmsnorm1p(X, w.norm_query, n, D, w.eps, qn.data());
  for (int s = 0; s < n; ++s) {
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(kn[s * D + d]) * qn[s * D + d];
    float g = static_cast<float>(dot) / std::sqrt(static_cast<float>(D));
    const float sign = g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);
    g = std::sqrt(std::max(std::fabs(g), 1e-6f)) * sign;
    const float gate = 1.0f / (1.0f + std::exp(-g));
    for (int d = 0; d < D; ++d) G[s * D + d] = gate * value[d];
  }
  grouped_rmsnorm1p(G.data(), w.norm_conv, n, D, w.eps, Gn.data());
  const int hist_rows = (w.K - 1) * w.dilation;
  for (int c = 0; c < nD; ++c) {
    // tap j reads Gn at t - (K-1-j)*dilation; the newest tap is the current row.
    float acc = w.conv[static_cast<int64_t>(c) * w.K + (w.K - 1)] * Gn[c];
    for (int j = 0; j < w.K - 1; ++j) {
      const int back = (w.K - 1 - j) * w.dilation;  // rows back from t
      acc += w.conv[static_cast<int64_t>(c) * w.K + j] *
             conv.hist[static_cast<size_t>(hist_rows - back) * nD + c];
    }
    out[c] = G[c] + acc / (1.0f + std::exp(-acc));
  }
  if (hist_rows > 0) {
    std::memmove(conv.hist.data(), conv.hist.data() + nD,
                 sizeof(float) * static_cast<size_t>(hist_rows - 1) * nD);
    std::memcpy(conv.hist.data() + static_cast<size_t>(hist_rows - 1) * nD, Gn.data(), sizeof(float) * nD);
  }
}

}  // namespace bloomery::cpu

// ---- CpuFamilyOps overrides
// ----------------------------------------------------------------------------------
#include "backend/backend.h"
#include "backend/cpu/cpu_family_ops.h"

namespace bloomery::cpu {

void CpuFamilyOps::ple_gate(Tensor& G, const Tensor& kn, const Tensor& qn, const Tensor& v) {
  const int64_t T = v.rows(), D = v.cols();
  const int64_t n = G.numel() / (T * D);
  if (G.numel() != T * n * D || kn.numel() != G.numel() || qn.numel() != G.numel())
    backend_shape_error("ple_gate", "G, kn, qn [T, n*D] for v " + v.shape_str(),
                        G.shape_str() + ", " + kn.shape_str() + ", " + qn.shape_str());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < n; ++s) {
      const float* k = kn.f32() + (t * n + s) * D;
      const float* q = qn.f32() + (t * n + s) * D;
      float dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += k[d] * q[d];
      float g = dot / std::sqrt(static_cast<float>(D));
      const float sign = g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);
      g = std::sqrt(std::max(std::fabs(g), 1e-6f)) * sign;
      const float gate = 1.0f / (1.0f + std::exp(-g));
      float* out = G.f32() + (t * n + s) * D;
      for (int64_t d = 0; d < D; ++d) out[d] = gate * v.f32()[t * D + d];
    }
}

}  // namespace bloomery::cpu
