// glm5_next manifold-constrained hyper-connections (models.md §4.5): Sinkhorn mixing, collapse, combine,
// head.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

// One Glm5NextTextHyperConnection (checkpoint hc_{attn,ffn}_{fn,base,scale}); f32.
struct MhcWeights {
  const float* fn = nullptr;     // [(2+n)*n, n*D]
  const float* base = nullptr;   // [(2+n)*n]
  const float* scale = nullptr;  // [3]
  int n = 0, D = 0;
  float norm_eps = 1e-5f;   // eps of the unweighted input RMSNorm (rms_norm_eps in transformers)
  float hc_eps = 1e-6f;     // hc_eps
  int sinkhorn_iters = 20;  // hc_sinkhorn_iters
};

// pre [n], post [n], comb [n*n] (row-major C[j][s]) and the collapsed input h [D] = sum_s pre[s] X[s].
void mhc_mix(const MhcWeights& w, const float* X, float* pre, float* post, float* comb, float* h);

// Sinkhorn projection of the logits matrix (row softmax + eps, then alternating normalisations); exposed for
// tests.
void mhc_sinkhorn(const float* logits, int n, float hc_eps, int iters, float* comb);

// New streams: X'[s] = post[s] * y + sum_j comb[j][s] * X[j]. X is updated in place.
void mhc_combine(float* X, const float* y, const float* post, const float* comb, int n, int D);

// Final head: unweighted mean of the n streams, [D].
void mhc_stream_mean(const float* X, int n, int D, float* out);

}  // namespace bloomery::cpu
