// qwen4_exp gated-residual hyper-connections (models.md §3.5): zero-centred grouped norm and the stream
// write. The read (norm, low-rank mask, mix) is composed from generic ops plus hc_read_mix in the model file.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

// y = rms(x_g) * (1 + w_g) for each of `groups` consecutive groups of width g (Qwen zero-centred RMSNorm,
// f32).
void grouped_rmsnorm1p(const float* x, const float* w, int groups, int g, float eps, float* y);

// X[s] += inject[s] * y for every stream s (the residual uses the un-normalised X).
void gated_residual_write(float* X, const float* y, const float* inject, int n, int D);

}  // namespace bloomery::cpu
