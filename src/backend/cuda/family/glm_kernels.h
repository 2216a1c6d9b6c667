// Launchers of the glm5_next family kernels (mHC, KDA, DSA indexer, NoPE MLA over the latent cache, sigmoid
// router): raw device pointers and sizes only, so the .cu files stay free of fmt/nlohmann. Host glue with
// the shape checks is in glm_ops.cc. Every launcher checks its launch (BLOOMERY_CUDA_CHECK_LAUNCH) and runs
// on `s`. Stored-format weights are read through weight_access.cuh (DeviceWeight), never switched on here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dequant.h"

namespace bloomery::cuda {

// ---- mHC (models.md §4.5) --------------------------------------------------------------------------------
constexpr int kMhcMaxStreams = 8;  // n (hc_mult; 4 shipped): (2+n)·n mix rows and the n×n Sinkhorn matrix
// Per token of X [T, n·D]: the unweighted RMSNorm of the whole row, mix = fn · f ([(2+n)n] from fn [(2+n)n,
// n·D] in its stored format), pre/post gates, the row-softmax + Sinkhorn combine matrix comb [T, n, n]
// (comb[j][s]), post [T, n] and h [T, D] = Σ_s pre[s] · X[s].
void mhc_pre(float* h, float* post, float* comb, const float* X, const DeviceWeight& fn, const float* base,
             const float* scale, int64_t T, int n, int64_t D, float norm_eps, float hc_eps,
             int sinkhorn_iters, cudaStream_t s);
// X[t, s, :] ← post[t, s] · y[t, :] + Σ_j comb[t, j, s] · X[t, j, :] (in place).
void mhc_post(float* X, const float* y, const float* post, const float* comb, int64_t T, int n, int64_t D,
              cudaStream_t s);
// out[t, :] = (Σ_s X[t, s, :]) / n.
void stream_mean(float* out, const float* X, int64_t T, int n, int64_t D, cudaStream_t s);

// ---- KDA (§4.6) ------------------------------------------------------------------------------------------
// g = lower · σ(exp(A_log[h]) · (f + dt_bias)) or −exp(A_log[h]) · softplus(f + dt_bias); f, g [T, H·dk].
void kda_gate(float* g, const float* f, const float* dt_bias, const float* A_log, int64_t T, int64_t H,
              int64_t dk, bool has_lower, float lower, cudaStream_t s);
// The KDA delta rule token by token (per-channel decay), q and k L2-normalised inside, q scaled by dk^−0.5;
// q, k, g [T, H, dk], v, out [T, H, dv], beta [T, H], state [H, dk, dv] f32 (updated). dk, dv ≤ 128.
constexpr int kKdaMaxDk = 128;
void kda_rule_steps(float* out, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, float* state, int64_t T, int64_t H, int64_t dk, int64_t dv,
                    cudaStream_t s);

// ---- DSA indexer (§4.7) ----------------------------------------------------------------------------------
// Finalises pools p0 … p0+np−1: pools[p, j] = Σ_m softmax_m(gates[pP+m, j] + ape[m, j]) · keys[pP+m, j].
void dsa_pool(float* pools, const float* keys, const float* gates, const float* ape, int64_t p0, int64_t np,
              int d, int P, cudaStream_t s);
// scores[t, p] = Σ_h wts[t, h] · relu((qi[t, h, :] · pools[p, :]) · scale) for p < (q_first + t + 1) / P,
// in the CPU op's order without FMA (bit-identical); row stride ld. Hi ≤ kDsaMaxHeads.
constexpr int kDsaMaxHeads = 64;
void dsa_pool_scores(float* scores, int64_t ld, const float* qi, const float* wts, const float* pools,
                     int64_t T, int Hi, int d, int64_t q_first, int P, float scale, cudaStream_t s);

// ---- NoPE MLA over the latent cache (absorbed form) ------------------------------------------------------
constexpr int kMlaMaxLatent = 1024;
// qt[t, h, :] = W_uk[h]ᵀ q[t, h, :] with W_uk[h] = kv_b rows h·(dq+dv) … +dq (stored format); q [T, H, dq].
void mla_absorb_q(float* qt, const float* q, const DeviceWeight& kv_b, int64_t T, int64_t H, int64_t dq,
                  int64_t dv, int64_t L, cudaStream_t s);
// oc[t, h, :] = Σ_j softmax_j(scale · qt[t, h] · latent[j]) latent[j] over j ≤ q0 + t with allowed[t, j] ≠ 0
// (zero when none); latent rows of L (f32, or BF16 when latent_bf16: -ctk/-ctv), allowed [T, S].
void mla_latent_attention(float* oc, const float* qt, const void* latent, bool latent_bf16,
                          const float* allowed, int64_t T, int64_t H, int64_t L, int64_t S, int64_t q0,
                          float scale, cudaStream_t s);
// out[t, h, :] = W_uv[h] oc[t, h, :] with W_uv[h] = kv_b rows h·(dq+dv)+dq … +dv.
void mla_project_v(float* out, const float* oc, const DeviceWeight& kv_b, int64_t T, int64_t H, int64_t dq,
                   int64_t dv, int64_t L, cudaStream_t s);

// ---- sigmoid noaux_tc router (§1.3) ----------------------------------------------------------------------
// Per token of logits [T, E]: s = σ(logit), choice = s + bias (bias may be null), group filter (n_group > 1:
// the topk_group groups by the sum of their two best choices), stable top-k of choice (lower index wins),
// weights = s[idx] / (Σ + 1e-20) (when renormalize) · routed_scaling. ties (device int) += tokens with an
// exact tie at a cut.
void route_sigmoid_topk(int32_t* ids, float* weights, const float* logits, const float* bias, int64_t T,
                        int64_t E, int k, int n_group, int topk_group, bool renormalize, float routed_scaling,
                        int* ties, cudaStream_t s);

}  // namespace bloomery::cuda
