// GQA softmax attention, decode and prompt: one block per (query head, token); keys in tiles of 128 with an
// online softmax in f32 (running max and sum), causal limit q0 + t and an optional allowed mask [T, S].
// Each warp scores keys with coalesced reads of a key row; each thread owns output dims e ≡ tid (mod 128).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kThreads = 128, kTile = 128, kMaxDvPerThread = 4;  // dv ≤ 512

__global__ void __launch_bounds__(kThreads)
    attention_k(float* __restrict__ out, const float* __restrict__ q, const float* __restrict__ k,
                const float* __restrict__ v, const float* __restrict__ allowed, int64_t Hq, int64_t d,
                int64_t S, int64_t Hkv, int64_t dv, int64_t q0, float scale) {
  extern __shared__ float qs[];  // d floats
  __shared__ float p[kTile];
  __shared__ float red[33];
  const int64_t h = blockIdx.x, t = blockIdx.y, kh = h / (Hq / Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t e = threadIdx.x; e < d; e += kThreads) qs[e] = q[(t * Hq + h) * d + e];
  __syncthreads();
  const int64_t last = q0 + t;
  float m = -INFINITY, l = 0.0f, o[kMaxDvPerThread] = {};
  for (int64_t j0 = 0; j0 <= last; j0 += kTile) {
    for (int jj = warp; jj < kTile; jj += kThreads / 32) {
      const int64_t j = j0 + jj;
      float sc = -INFINITY;
      if (j <= last && !(allowed && allowed[t * S + j] == 0.0f)) {
        const float* kr = k + (j * Hkv + kh) * d;
        float dot = 0.0f;
        for (int64_t e = lane; e < d; e += 32) dot = fmaf(qs[e], kr[e], dot);
        sc = warp_reduce_sum(dot) * scale;
      }
      if (lane == 0) p[jj] = sc;
    }
    __syncthreads();
    const float tile_max = block_reduce_max(p[threadIdx.x], red);
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // nothing visible yet (uniform across the block)
    const float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
    const float e_mine = p[threadIdx.x] == -INFINITY ? 0.0f : expf(p[threadIdx.x] - m_new);
    __syncthreads();
    p[threadIdx.x] = e_mine;
    l = l * corr + block_reduce_sum(e_mine, red);  // the reduction's barriers publish p
    const int64_t jn = last - j0 + 1 < kTile ? last - j0 + 1 : kTile;
#pragma unroll
    for (int c = 0; c < kMaxDvPerThread; ++c) {
      const int64_t e = threadIdx.x + c * kThreads;
      if (e >= dv) break;
      float acc = o[c] * corr;
      for (int64_t jj = 0; jj < jn; ++jj) acc = fmaf(p[jj], v[((j0 + jj) * Hkv + kh) * dv + e], acc);
      o[c] = acc;
    }
    m = m_new;
    __syncthreads();
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxDvPerThread; ++c) {
    const int64_t e = threadIdx.x + c * kThreads;
    if (e < dv) out[(t * Hq + h) * dv + e] = o[c] * inv;
  }
}

}  // namespace

void attention(float* out, const float* q, const float* k, const float* v, const float* allowed, int64_t T,
               int64_t Hq, int64_t d, int64_t S, int64_t Hkv, int64_t dv, int64_t q0, float scale,
               cudaStream_t s) {
  if (T == 0 || Hq == 0) return;
  const std::string what = "attention q[" + std::to_string(T) + ", " + std::to_string(Hq) + ", " +
                           std::to_string(d) + "] kv[" + std::to_string(S) + ", " + std::to_string(Hkv) +
                           ", " + std::to_string(dv) + "]";
  if (dv > kThreads * kMaxDvPerThread) BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": dv > 512");
  attention_k<<<dim3(static_cast<unsigned>(Hq), static_cast<unsigned>(T)), kThreads, d * sizeof(float), s>>>(
      out, q, k, v, allowed, Hq, d, S, Hkv, dv, q0, scale);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

}  // namespace bloomery::cuda
