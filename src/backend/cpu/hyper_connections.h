// qwen4_exp gated-residual hyper-connections (models.md §3.5): stream read, stream write, final collapse.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

// One Qwen4ExpTextGatedResidual module: n streams of width D, low rank r. All weights f32, row-major [out,
// in].
struct GatedResidualWeights {
  const float* hc_norm = nullptr;   // [n*D] zero-centred weight, one D-slice per stream
  const float* w_down = nullptr;    // [r, n*D]
  const float* w_up = nullptr;      // [n*D, r]
  const float* w_inject = nullptr;  // [n, n*D]; nullptr for the final mixer (no write weights)
  int n = 0, D = 0, r = 0;
  float eps = 1e-6f;
};

// y = rms(x_g) * (1 + w_g) for each of `groups` consecutive groups of width g (Qwen zero-centred RMSNorm,
// f32).
void grouped_rmsnorm1p(const float* x, const float* w, int groups, int g, float eps, float* y);

// Reads the streams X [n*D] of one token: u [D] is the sublayer input (already normalised), inject [n] the
// per-stream write weights 2*sigmoid(W_inj Xn / n) (left untouched when w.w_inject is null).
void gated_residual_read(const GatedResidualWeights& w, const float* X, float* u, float* inject);

// X[s] += inject[s] * y for every stream s (the residual uses the un-normalised X).
void gated_residual_write(float* X, const float* y, const float* inject, int n, int D);

// Same over T tokens: X [T, n*D], u [T, D], inject [T, n].
void gated_residual_read_rows(const GatedResidualWeights& w, const float* X, int64_t T, float* u,
                              float* inject);
void gated_residual_write_rows(float* X, const float* y, const float* inject, int64_t T, int n, int D);

}  // namespace bloomery::cpu
