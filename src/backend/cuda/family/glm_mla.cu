// glm5_next NoPE MLA over the latent cache, absorbed form (models.md §4.7): the queries are taken into the
// latent space through W_uk (q̃ = W_ukᵀ q), attend over the cached latents c_j directly, and the latent
// average comes back through W_uv. kv_b stays in its stored format; both projections read it through
// weight_element (weight_access.cuh), a coalesced row of L elements at a time.
#include <cuda_bf16.h>

#include <string>

#include "backend/cuda/attention/kv_load.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/glm_kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kTok = 8;  // tokens per block of the projections: one pass over a head's weight serves them
constexpr int kProjThreads = 256;
constexpr int kAttWarps = 4;
constexpr int kLanesL = kMlaMaxLatent / 32;  // latent values per lane

// Block (head, token chunk): thread l accumulates q̃[t, h, l] for the chunk's tokens over the dq rows of W_uk.
__global__ void __launch_bounds__(kProjThreads)
    mla_absorb_k(float* qt, const float* q, DeviceWeight w, int64_t T, int64_t H, int dq, int dv, int L) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ float qs[];  // [kTok, dq]
  const int64_t h = blockIdx.x, t0 = blockIdx.y * int64_t(kTok);
  const int nt = static_cast<int>(T - t0 < kTok ? T - t0 : kTok);
  for (int i = threadIdx.x; i < kTok * dq; i += kProjThreads) {
    const int tt = i / dq;
    qs[i] = tt < nt ? q[((t0 + tt) * H + h) * dq + i % dq] : 0.0f;
  }
  __syncthreads();
  const uint64_t row0 = static_cast<uint64_t>(h) * (dq + dv);
  for (int l = threadIdx.x; l < L; l += kProjThreads) {
    float acc[kTok];
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) acc[tt] = 0.0f;
    for (int a = 0; a < dq; ++a) {
      const float wv = weight_element(w, row0 + a, l);
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) acc[tt] = fmaf(qs[tt * dq + a], wv, acc[tt]);
    }
    for (int tt = 0; tt < nt; ++tt) qt[((t0 + tt) * H + h) * L + l] = acc[tt];
  }
}

// Block (head, token): each warp takes runs of 32 key positions, finds the allowed ones with one ballot and
// folds each into an online softmax (running max, sum, and the lanes' share of the latent average); the
// warps' partial results are merged at the end.
// The latent cache is f32 or BF16 (-ctk/-ctv; C = float or __nv_bfloat16), widened exactly as it is read.
template <typename C>
__global__ void __launch_bounds__(kAttWarps * 32)
    mla_attend_k(float* oc, const float* qt, const C* latent, const float* allowed, int64_t H, int L,
                 int64_t S, int64_t q0, float scale) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float qs[kMlaMaxLatent];
  __shared__ float wm[kAttWarps], wsum[kAttWarps];
  __shared__ float woc[kAttWarps][kMlaMaxLatent];
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const float* qrow = qt + (t * H + h) * L;
  for (int l = threadIdx.x; l < L; l += kAttWarps * 32) qs[l] = qrow[l];
  __syncthreads();
  float m = -INFINITY, sum = 0.0f, acc[kLanesL];
#pragma unroll
  for (int i = 0; i < kLanesL; ++i) acc[i] = 0.0f;
  const int64_t vis = q0 + t + 1;
  const float* arow = allowed + t * S;
  for (int64_t j0 = int64_t(wid) * 32; j0 < vis; j0 += kAttWarps * 32) {
    const int64_t jl = j0 + lane;
    unsigned sel = __ballot_sync(0xFFFFFFFFu, jl < vis && arow[jl] != 0.0f);
    while (sel) {
      const int bit = __ffs(sel) - 1;
      sel &= sel - 1;
      const C* c = latent + (j0 + bit) * L;
      float cv[kLanesL], dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kLanesL; ++i) {
        const int l = i * 32 + lane;
        cv[i] = l < L ? load_kv(c, l) : 0.0f;
        dot = fmaf(l < L ? qs[l] : 0.0f, cv[i], dot);
      }
      const float sc = warp_reduce_sum(dot) * scale;
      const float mn = fmaxf(m, sc);
      const float corr = expf(m - mn), p = expf(sc - mn);
      sum = sum * corr + p;
#pragma unroll
      for (int i = 0; i < kLanesL; ++i) acc[i] = acc[i] * corr + p * cv[i];
      m = mn;
    }
  }
  if (lane == 0) wm[wid] = m, wsum[wid] = sum;
#pragma unroll
  for (int i = 0; i < kLanesL; ++i)
    if (i * 32 + lane < L) woc[wid][i * 32 + lane] = acc[i];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttWarps; ++w) M = fmaxf(M, wm[w]);
  float total = 0.0f, f[kAttWarps];
  for (int w = 0; w < kAttWarps; ++w) {
    f[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - M);
    total += wsum[w] * f[w];
  }
  float* out = oc + (t * H + h) * L;
  for (int l = threadIdx.x; l < L; l += kAttWarps * 32) {
    float o = 0.0f;
    for (int w = 0; w < kAttWarps; ++w) o += woc[w][l] * f[w];
    out[l] = total > 0.0f ? o / total : 0.0f;
  }
}

// Block (head, token chunk): warp w computes output rows a = w, w + 8, … of W_uv[h] · oc for the chunk's
// tokens, the lanes reading the weight row coalesced.
__global__ void __launch_bounds__(kProjThreads)
    mla_project_k(float* out, const float* oc, DeviceWeight w, int64_t T, int64_t H, int dq, int dv, int L) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ float os[];  // [kTok, L]
  const int64_t h = blockIdx.x, t0 = blockIdx.y * int64_t(kTok);
  const int nt = static_cast<int>(T - t0 < kTok ? T - t0 : kTok);
  for (int i = threadIdx.x; i < kTok * L; i += kProjThreads) {
    const int tt = i / L;
    os[i] = tt < nt ? oc[((t0 + tt) * H + h) * L + i % L] : 0.0f;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const uint64_t row0 = static_cast<uint64_t>(h) * (dq + dv) + dq;
  for (int a = wid; a < dv; a += kProjThreads / 32) {
    float acc[kTok];
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) acc[tt] = 0.0f;
    for (int l = lane; l < L; l += 32) {
      const float wv = weight_element(w, row0 + a, l);
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) acc[tt] = fmaf(wv, os[tt * L + l], acc[tt]);
    }
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) acc[tt] = warp_reduce_sum(acc[tt]);
    if (lane == 0)
      for (int tt = 0; tt < nt; ++tt) out[((t0 + tt) * H + h) * dv + a] = acc[tt];
  }
}

std::string mla_shape(int64_t T, int64_t H, int64_t L) {
  return "[" + std::to_string(T) + ", " + std::to_string(H) + ", " + std::to_string(L) + "]";
}

void check_sizes(const std::string& what, int64_t T, int64_t H, int64_t L, size_t shmem) {
  if (L < 1 || L > kMlaMaxLatent || H > 65535 || (T + kTok - 1) / kTok > 65535 || shmem > 48 * 1024)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what +
                                                   ": needs latent <= 1024, heads <= 65535, a head row "
                                                   "of 8 tokens within 48 KiB");
}

}  // namespace

void mla_absorb_q(float* qt, const float* q, const DeviceWeight& kv_b, int64_t T, int64_t H, int64_t dq,
                  int64_t dv, int64_t L, cudaStream_t s) {
  if (T == 0 || H == 0) return;
  const std::string what = "mla_absorb_q q " + mla_shape(T, H, dq) + " latent " + std::to_string(L);
  const size_t shmem = static_cast<size_t>(kTok) * dq * sizeof(float);
  check_sizes(what, T, H, L, shmem);
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((T + kTok - 1) / kTok));
  pdl_launch(mla_absorb_k, grid, kProjThreads, shmem, s, qt, q, kv_b, T, H, static_cast<int>(dq),
             static_cast<int>(dv), static_cast<int>(L));
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

void mla_latent_attention(float* oc, const float* qt, const void* latent, bool latent_bf16,
                          const float* allowed, int64_t T, int64_t H, int64_t L, int64_t S, int64_t q0,
                          float scale, cudaStream_t s) {
  if (T == 0 || H == 0) return;
  const std::string what = "mla_latent_attention q̃ " + mla_shape(T, H, L) + " keys " + std::to_string(S);
  check_sizes(what, T, H, L, 0);
  if (T > 65535) BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": needs T <= 65535 per launch");
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>(T));
  if (latent_bf16)
    pdl_launch(mla_attend_k<__nv_bfloat16>, grid, kAttWarps * 32, 0, s, oc, qt,
               static_cast<const __nv_bfloat16*>(latent), allowed, H, static_cast<int>(L), S, q0, scale);
  else
    pdl_launch(mla_attend_k<float>, grid, kAttWarps * 32, 0, s, oc, qt, static_cast<const float*>(latent),
               allowed, H, static_cast<int>(L), S, q0, scale);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

void mla_project_v(float* out, const float* oc, const DeviceWeight& kv_b, int64_t T, int64_t H, int64_t dq,
                   int64_t dv, int64_t L, cudaStream_t s) {
  if (T == 0 || H == 0) return;
  const std::string what = "mla_project_v latent " + mla_shape(T, H, L) + " dv " + std::to_string(dv);
  const size_t shmem = static_cast<size_t>(kTok) * L * sizeof(float);
  check_sizes(what, T, H, L, shmem);
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((T + kTok - 1) / kTok));
  pdl_launch(mla_project_k, grid, kProjThreads, shmem, s, out, oc, kv_b, T, H, static_cast<int>(dq),
             static_cast<int>(dv), static_cast<int>(L));
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

}  // namespace bloomery::cuda
