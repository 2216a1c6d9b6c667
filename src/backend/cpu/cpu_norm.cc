// RMSNorm variants (plain, zero-centred 1+w, unweighted; grouped; gated) and LayerNorm, all in f32.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/op_checks.h"

namespace bloomery::cpu {

namespace {

inline float inv_rms(const float* x, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  return 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
}

}  // namespace

void CpuBackend::rms_norm(Tensor& out, const Tensor& x, const Weight* w, float eps, NormKind kind,
                          int64_t group) {
  const int64_t C = x.cols(), R = x.rows();
  const RmsNormShape sh = check_rms_norm_args(out, x, w, kind, group);
  group = sh.group;
  const bool per_channel = sh.per_group;
  const float* wp = kind == NormKind::Unweighted ? nullptr : w->dense().f32();
  const int64_t groups = R * (C / group);
  const float* X = x.f32();
  float* Y = out.f32();
  owned_pool_->parallel_for(
      groups,
      [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
          const float* xg = X + g * group;
          float* yg = Y + g * group;
          const float s = inv_rms(xg, group, eps);
          const float* wg = wp ? (per_channel ? wp + (g % (C / group)) * group : wp) : nullptr;
          for (int64_t i = 0; i < group; ++i) {
            const float v = xg[i] * s;
            switch (kind) {
              case NormKind::Plain:
                yg[i] = wg[i] * v;
                break;
              case NormKind::OnePlus:
                yg[i] = v * (1.0f + wg[i]);
                break;
              case NormKind::Unweighted:
                yg[i] = v;
                break;
            }
          }
        }
      },
      std::max<int64_t>(1, 4096 / group));
}

void CpuBackend::rms_norm_gated(Tensor& out, const Tensor& x, const Tensor& z, const Weight& w, float eps,
                                Act act) {
  const int64_t G = w.numel();
  BLOOMERY_NEED(x.numel() % G == 0 && z.numel() == x.numel() && out.numel() == x.numel(), "rms_norm_gated",
                "x, z, out of equal size, a multiple of " + std::to_string(G),
                x.shape_str() + " " + z.shape_str());
  const int64_t groups = x.numel() / G;
  const float *X = x.f32(), *Z = z.f32(), *W = w.dense().f32();
  float* Y = out.f32();
  for (int64_t g = 0; g < groups; ++g) {
    const float s = inv_rms(X + g * G, G, eps);
    for (int64_t i = 0; i < G; ++i) {
      const int64_t j = g * G + i;
      Y[j] = (W[i] * (X[j] * s)) * act_apply(act, Z[j]);
    }
  }
}

void CpuBackend::layer_norm(Tensor& out, const Tensor& x, const Weight& w, const Weight& b, float eps) {
  const int64_t C = x.cols(), R = x.rows();
  BLOOMERY_NEED(w.numel() == C && b.numel() == C && out.numel() == x.numel(), "layer_norm",
                "weight and bias of " + std::to_string(C),
                shape_string(w.shape()) + " " + shape_string(b.shape()));
  const float *X = x.f32(), *W = w.dense().f32(), *B = b.dense().f32();
  float* Y = out.f32();
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = X + r * C;
    float mean = 0.0f;
    for (int64_t i = 0; i < C; ++i) mean += xr[i];
    mean /= static_cast<float>(C);
    float var = 0.0f;
    for (int64_t i = 0; i < C; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<float>(C);
    const float s = 1.0f / std::sqrt(var + eps);
    for (int64_t i = 0; i < C; ++i) Y[r * C + i] = (xr[i] - mean) * s * W[i] + B[i];
  }
}

}  // namespace bloomery::cpu
