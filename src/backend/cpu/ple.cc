// qwen4_exp PLE stream gate (CpuFamilyOps::ple_gate); follows transformers' Qwen4ExpTextPLELayer in f32.
#include <algorithm>
#include <cmath>

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
