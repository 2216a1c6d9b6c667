// glm5_next mHC; follows transformers' Glm5NextTextHyperConnection (row softmax, then Sinkhorn) in f32.
#include "backend/cpu/mhc.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include "backend/backend.h"
#include "backend/cpu/cpu_family_ops.h"

namespace bloomery::cpu {

namespace {
float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
}  // namespace

void mhc_sinkhorn(const float* logits, int n, float hc_eps, int iters, float* c) {
  for (int i = 0; i < n; ++i) {
    float mx = logits[i * n];
    for (int j = 1; j < n; ++j) mx = std::max(mx, logits[i * n + j]);
    float sum = 0;
    for (int j = 0; j < n; ++j) sum += (c[i * n + j] = std::exp(logits[i * n + j] - mx));
    for (int j = 0; j < n; ++j) c[i * n + j] = c[i * n + j] / sum + hc_eps;
  }
  auto cols = [&] {
    for (int j = 0; j < n; ++j) {
      float s = 0;
      for (int i = 0; i < n; ++i) s += c[i * n + j];
      for (int i = 0; i < n; ++i) c[i * n + j] /= (s + hc_eps);
    }
  };
  auto rows = [&] {
    for (int i = 0; i < n; ++i) {
      float s = 0;
      for (int j = 0; j < n; ++j) s += c[i * n + j];
      for (int j = 0; j < n; ++j) c[i * n + j] /= (s + hc_eps);
    }
  };
  cols();
  for (int it = 0; it < iters - 1; ++it) {
    rows();
    cols();
  }
}

void mhc_mix(const MhcWeights& w, const float* X, float* pre, float* post, float* comb, float* h) {
  const int n = w.n, D = w.D;
  const int64_t nD = static_cast<int64_t>(n) * D;
  const int mix = (2 + n) * n;
  double ss = 0;
  for (int64_t i = 0; i < nD; ++i) ss += static_cast<double>(X[i]) * X[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / nD) + w.norm_eps);
  std::vector<float> m(mix);
  for (int o = 0; o < mix; ++o) {
    const float* row = w.fn + o * nD;
    double acc = 0;
    for (int64_t i = 0; i < nD; ++i) acc += static_cast<double>(row[i]) * (X[i] * inv);
    m[o] = static_cast<float>(acc);
  }
  for (int s = 0; s < n; ++s) {
    pre[s] = sigmoid(m[s] * w.scale[0] + w.base[s]) + w.hc_eps;
    post[s] = 2.0f * sigmoid(m[n + s] * w.scale[1] + w.base[n + s]);
  }
  std::vector<float> logits(n * n);
  for (int k = 0; k < n * n; ++k) logits[k] = m[2 * n + k] * w.scale[2] + w.base[2 * n + k];
  mhc_sinkhorn(logits.data(), n, w.hc_eps, w.sinkhorn_iters, comb);
  for (int d = 0; d < D; ++d) {
    float acc = 0;
    for (int s = 0; s < n; ++s) acc += pre[s] * X[s * D + d];
    h[d] = acc;
  }
}

void mhc_combine(float* X, const float* y, const float* post, const float* comb, int n, int D) {
  std::vector<float> old(X, X + static_cast<int64_t>(n) * D);
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < D; ++d) {
      float acc = 0;
      for (int j = 0; j < n; ++j) acc += comb[j * n + s] * old[j * D + d];
      X[s * D + d] = post[s] * y[d] + acc;
    }
}

void mhc_stream_mean(const float* X, int n, int D, float* out) {
  for (int d = 0; d < D; ++d) {
    float acc = 0;
    for (int s = 0; s < n; ++s) acc += X[s * D + d];
    out[d] = acc / static_cast<float>(n);
  }
}

}  // namespace bloomery::cpu

// ---- CpuFamilyOps overrides ----

namespace bloomery::cpu {

void CpuFamilyOps::mhc_pre(Tensor& h, Tensor& post, Tensor& comb, const Tensor& X, const Weight& fn,
                           const Weight& base, const Weight& scale, const MhcSpec& spec) {
  const int64_t T = h.rows(), D = h.cols(), n = spec.n;
  if (X.numel() != T * n * D || post.numel() != T * n || comb.numel() != T * n * n ||
      fn.numel() != (2 + n) * n * n * D || base.numel() != (2 + n) * n || scale.numel() != 3)
    backend_shape_error(
        "mhc_pre", "X [T, n*D], post [T, n], comb [T, n, n], fn [(2+n)n, n*D]",
        X.shape_str() + ", " + post.shape_str() + ", " + comb.shape_str() + ", " + shape_string(fn.shape()));
  MhcWeights w;
  w.fn = fn.dense().f32();
  w.base = base.dense().f32();
  w.scale = scale.dense().f32();
  w.n = static_cast<int>(n);
  w.D = static_cast<int>(D);
  w.norm_eps = spec.norm_eps;
  w.hc_eps = spec.hc_eps;
  w.sinkhorn_iters = spec.sinkhorn_iters;
  std::vector<float> pre(n);
  pool().parallel_for(T, [&](int64_t t0, int64_t t1) {
    std::vector<float> pre_t(n);
    for (int64_t t = t0; t < t1; ++t)
      mhc_mix(w, X.f32() + t * n * D, pre_t.data(), post.f32() + t * n, comb.f32() + t * n * n,
              h.f32() + t * D);
  });
}

void CpuFamilyOps::mhc_post(Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb) {
  const int64_t T = y.rows(), D = y.cols(), n = post.cols();
  if (X.numel() != T * n * D || comb.numel() != T * n * n)
    backend_shape_error("mhc_post", "X [T, n*D], comb [T, n, n]", X.shape_str() + ", " + comb.shape_str());
  for (int64_t t = 0; t < T; ++t)
    mhc_combine(X.f32() + t * n * D, y.f32() + t * D, post.f32() + t * n, comb.f32() + t * n * n,
                static_cast<int>(n), static_cast<int>(D));
}

void CpuFamilyOps::stream_mean(Tensor& out, const Tensor& X, int n) {
  const int64_t T = out.rows(), D = out.cols();
  if (X.numel() != T * n * D) backend_shape_error("stream_mean", "X [T, n*D]", X.shape_str());
  for (int64_t t = 0; t < T; ++t)
    mhc_stream_mean(X.f32() + t * n * D, n, static_cast<int>(D), out.f32() + t * D);
}

}  // namespace bloomery::cpu
