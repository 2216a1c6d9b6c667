// glm5_next KDA (models.md §1.6, §4.6): delta rule with per-channel decay, recurrent step and chunked prompt
// form.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

// Layout: q, k, g [T, H, dk]; v, out [T, H, dv]; beta [T, H]; state [H, dk, dv] (f32, updated in place).
// q and k must already be L2-normalised and q scaled by dk^-0.5 (kda_l2norm_rows); g is the log-decay (<= 0).
struct KdaShape {
  int64_t T = 0;
  int H = 0, dk = 0, dv = 0;
};

// x [rows, d] <- x / sqrt(sum x^2 + eps) * scale (FLA / GLM l2norm, f32).
void kda_l2norm_rows(float* x, int64_t rows, int d, float eps, float scale);

// Token-by-token recurrence (decode form; also the reference for the chunked form).
void kda_recurrent(const KdaShape& s, const float* q, const float* k, const float* v, const float* g,
                   const float* beta, float* state, float* out);

// Chunked prompt form (transformers' chunk_kimi_delta_attention order of operations), same results.
void kda_chunked(const KdaShape& s, const float* q, const float* k, const float* v, const float* g,
                 const float* beta, float* state, float* out, int chunk = 64);

// KDA forget gate: g [T, H, dk] = lower_bound * sigmoid(exp(A_log[h]) * (f + dt_bias)) (lower_bound < 0), or
// -exp(A_log[h]) * softplus(f + dt_bias) when has_lower_bound is false. f [T, H*dk] is W_fb W_fa h.
void kda_gate(const float* f, const float* dt_bias, const float* A_log, int64_t T, int H, int dk,
              bool has_lower_bound, float lower_bound, float* g);

}  // namespace bloomery::cpu
