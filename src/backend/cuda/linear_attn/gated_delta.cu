// Gated delta rule (GDN), token by token: one block per value head, one thread per value column b holding the
// state column S[:, b] (dk ≤ 128) in registers across all T tokens; f32 throughout. Serves decode and, for
// now, prompts too (the chunked form equals this recurrence up to rounding).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"

namespace bloomery::cuda {
namespace {

__global__ void gdn_recurrent_k(float* __restrict__ out, const float* __restrict__ q,
                                const float* __restrict__ k, const float* __restrict__ v,
                                const float* __restrict__ g, const float* __restrict__ beta,
                                float* __restrict__ state, int64_t T, int64_t Hk, int64_t Hv, int dk, int dv,
                                bool l2) {
  __shared__ float qs[kGdnMaxDk], ks[kGdnMaxDk];
  __shared__ float red[33];
  const int64_t h = blockIdx.x, kh = h / (Hv / Hk);
  const int b = threadIdx.x;
  float* S = state + h * static_cast<int64_t>(dk) * dv;
  float s[kGdnMaxDk];
#pragma unroll
  for (int a = 0; a < kGdnMaxDk; ++a)
    if (a < dk) s[a] = S[a * dv + b];
  const float qscale = 1.0f / sqrtf(static_cast<float>(dk));
  for (int64_t t = 0; t < T; ++t) {
    const float* qt = q + (t * Hk + kh) * dk;
    const float* kt = k + (t * Hk + kh) * dk;
    float sq = 0.0f, sk = 0.0f;
    for (int a = b; a < dk; a += dv) sq += qt[a] * qt[a], sk += kt[a] * kt[a];
    float qn = 1.0f, kn = 1.0f;
    if (l2) {
      qn = 1.0f / sqrtf(block_reduce_sum(sq, red) + 1e-6f);
      kn = 1.0f / sqrtf(block_reduce_sum(sk, red) + 1e-6f);
    }
    for (int a = b; a < dk; a += dv) qs[a] = (qt[a] * qn) * qscale, ks[a] = kt[a] * kn;
    __syncthreads();
    const float decay = expf(g[t * Hv + h]), bt = beta[t * Hv + h];
    float mem = 0.0f;
#pragma unroll
    for (int a = 0; a < kGdnMaxDk; ++a)
      if (a < dk) {
        s[a] *= decay;
        mem = fmaf(s[a], ks[a], mem);
      }
    const float delta = (v[(t * Hv + h) * dv + b] - mem) * bt;
    float o = 0.0f;
#pragma unroll
    for (int a = 0; a < kGdnMaxDk; ++a)
      if (a < dk) {
        s[a] = fmaf(ks[a], delta, s[a]);
        o = fmaf(s[a], qs[a], o);
      }
    out[(t * Hv + h) * dv + b] = o;
    __syncthreads();  // qs/ks are rewritten by the next token
  }
#pragma unroll
  for (int a = 0; a < kGdnMaxDk; ++a)
    if (a < dk) S[a * dv + b] = s[a];
}

}  // namespace

void gated_delta_rule(float* out, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, int64_t T, int64_t Hk, int64_t Hv, int64_t dk,
                      int64_t dv, bool l2norm_qk, cudaStream_t s) {
  const std::string what = "gated_delta_rule q[" + std::to_string(T) + ", " + std::to_string(Hk) + ", " +
                           std::to_string(dk) + "] v[" + std::to_string(Hv) + ", " + std::to_string(dv) + "]";
  if (dk > kGdnMaxDk || dv % 32 != 0 || dv > 1024)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": needs dk <= 128 and dv a multiple of 32 up to 1024");
  if (Hv == 0) return;
  gdn_recurrent_k<<<static_cast<unsigned>(Hv), static_cast<unsigned>(dv), 0, s>>>(
      out, q, k, v, g, beta, state, T, Hk, Hv, static_cast<int>(dk), static_cast<int>(dv), l2norm_qk);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

}  // namespace bloomery::cuda
