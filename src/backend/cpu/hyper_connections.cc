// qwen4_exp gated-residual hyper-connections; math follows transformers' Qwen4ExpTextGatedResidual in f32.
#include "backend/cpu/hyper_connections.h"

#include <cmath>
#include <vector>
#include "backend/backend.h"
#include "backend/cpu/cpu_family_ops.h"

namespace bloomery::cpu {

void grouped_rmsnorm1p(const float* x, const float* w, int groups, int g, float eps, float* y) {
  for (int s = 0; s < groups; ++s) {
    const float* xs = x + static_cast<int64_t>(s) * g;
    double ss = 0;
    for (int i = 0; i < g; ++i) ss += static_cast<double>(xs[i]) * xs[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / g) + eps);
    for (int i = 0; i < g; ++i) y[s * g + i] = (xs[i] * inv) * (1.0f + w[s * g + i]);
  }
}

void gated_residual_write(float* X, const float* y, const float* inject, int n, int D) {
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < D; ++d) X[s * D + d] += inject[s] * y[d];
}

}  // namespace bloomery::cpu

// ---- CpuFamilyOps overrides ----

namespace bloomery::cpu {

void CpuFamilyOps::hc_read_mix(Tensor& u, const Tensor& m, const Tensor& xn, int n) {
  const int64_t T = u.rows(), D = u.cols();
  if (m.numel() != T * n * D || xn.numel() != T * n * D)
    backend_shape_error("hc_read_mix", "m, xn [T, n*D] with u " + u.shape_str(),
                        m.shape_str() + ", " + xn.shape_str());
  const float *M = m.f32(), *X = xn.f32();
  float* U = u.f32();
  pool().parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t d = 0; d < D; ++d) {
        float acc = 0;
        for (int s = 0; s < n; ++s) {
          const int64_t i = (t * n + s) * D + d;
          acc += (1.0f / (1.0f + std::exp(-M[i]))) * X[i];
        }
        U[t * D + d] = acc / static_cast<float>(n);
      }
  });
}

void CpuFamilyOps::hc_inject(Tensor& X, const Tensor& y, const Tensor& inj) {
  const int64_t T = y.rows(), D = y.cols(), n = inj.cols();
  if (X.numel() != T * n * D || inj.rows() != T)
    backend_shape_error("hc_inject", "X [T, n*D], inj [T, n] for y " + y.shape_str(),
                        X.shape_str() + ", " + inj.shape_str());
  for (int64_t t = 0; t < T; ++t)
    gated_residual_write(X.f32() + t * n * D, y.f32() + t * D, inj.f32() + t * n, static_cast<int>(n),
                         static_cast<int>(D));
}

}  // namespace bloomery::cpu
