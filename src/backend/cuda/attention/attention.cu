// GQA softmax attention, decode and prompt: one block per (query head, token); keys in tiles of 128 with an
// online softmax in f32 (running max and sum), causal limit q0 + t and an optional allowed mask [T, S].
// Each warp scores keys with coalesced reads of a key row; each thread owns output dims e ≡ tid (mod 128).
// Decode (few query rows, long cache) splits the keys over several blocks and merges (m, l, o) partials.
// Prompts take the tensor-core kernel (flash_attention.cu) and decode rows the by-KV-head kernel
// (decode_attention.cu) where they apply; this one is their reference.
// K and V are f32 or BF16 caches (kv_bf16), one instantiation each: BF16 elements are widened exactly as they
// are loaded (kv_load.cuh), so the arithmetic is the f32 kernel's on the rounded values.
#include <algorithm>
#include <string>

#include "backend/cuda/attention/decode_attention.h"
#include "backend/cuda/attention/flash_attention.h"
#include "backend/cuda/attention/kv_load.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kThreads = 128, kTile = 128, kMaxDvPerThread = 4;  // dv ≤ 512
// Keys per split in split-KV decode: one tile, so a decode step's (head, split) blocks fill the card even at
// a few thousand keys (a block walks its tiles one after another; measured on H200, docs/performance.md).
constexpr int64_t kSplitKeys = 128;
constexpr int kMaxSplits = 64;

template <typename KV>  // float or __nv_bfloat16
__global__ void __launch_bounds__(kThreads)
    attention_k(float* __restrict__ out, const float* __restrict__ q, const KV* __restrict__ k,
                const KV* __restrict__ v, const float* __restrict__ allowed, int64_t Hq, int64_t d, int64_t S,
                int64_t Hkv, int64_t dv, int64_t q0, float scale, int64_t chunk, float* __restrict__ part) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ float qs[];  // d floats
  __shared__ float p[kTile];
  __shared__ float red[33];
  const int64_t h = blockIdx.x, t = blockIdx.y, kh = h / (Hq / Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t e = threadIdx.x; e < d; e += kThreads) qs[e] = q[(t * Hq + h) * d + e];
  __syncthreads();
  // This block's keys: [jb, je) of the causal range 0..q0+t (one split of it when part != nullptr).
  const int64_t jb = blockIdx.z * chunk, je_all = q0 + t + 1;
  const int64_t je = jb + chunk < je_all ? jb + chunk : je_all;
  const int64_t last = je - 1;
  float m = -INFINITY, l = 0.0f, o[kMaxDvPerThread] = {};
  for (int64_t j0 = jb; j0 <= last; j0 += kTile) {
    for (int jj = warp; jj < kTile; jj += kThreads / 32) {
      const int64_t j = j0 + jj;
      float sc = -INFINITY;
      if (j <= last && !(allowed && allowed[t * S + j] == 0.0f)) {
        const KV* kr = k + (j * Hkv + kh) * d;
        float dot = 0.0f;
        for (int64_t e = lane; e < d; e += 32) dot = fmaf(qs[e], load_kv(kr, e), dot);
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
      for (int64_t jj = 0; jj < jn; ++jj) acc = fmaf(p[jj], load_kv(v, ((j0 + jj) * Hkv + kh) * dv + e), acc);
      o[c] = acc;
    }
    m = m_new;
    __syncthreads();
  }
  if (part) {  // split: unnormalised o, then m and l, per (t, h, split); attention_combine merges them
    float* pr = part + ((t * Hq + h) * gridDim.z + blockIdx.z) * (dv + 2);
#pragma unroll
    for (int c = 0; c < kMaxDvPerThread; ++c) {
      const int64_t e = threadIdx.x + c * kThreads;
      if (e < dv) pr[e] = o[c];
    }
    if (threadIdx.x == 0) pr[dv] = m, pr[dv + 1] = l;
    return;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxDvPerThread; ++c) {
    const int64_t e = threadIdx.x + c * kThreads;
    if (e < dv) out[(t * Hq + h) * dv + e] = o[c] * inv;
  }
}

// Merges the splits of one (t, h): M = max m_s, L = Σ l_s e^{m_s − M}, out = Σ o_s e^{m_s − M} / L.
__global__ void attention_combine(float* __restrict__ out, const float* __restrict__ part, int splits,
                                  int64_t dv) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t th = blockIdx.x;
  const float* pr = part + th * splits * (dv + 2);
  float M = -INFINITY;
  for (int sp = 0; sp < splits; ++sp) M = fmaxf(M, pr[sp * (dv + 2) + dv]);
  float L = 0.0f;
  for (int sp = 0; sp < splits; ++sp) {
    const float ms = pr[sp * (dv + 2) + dv];
    if (ms != -INFINITY) L += pr[sp * (dv + 2) + dv + 1] * expf(ms - M);
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int64_t e = threadIdx.x; e < dv; e += blockDim.x) {
    float acc = 0.0f;
    for (int sp = 0; sp < splits; ++sp) {
      const float ms = pr[sp * (dv + 2) + dv];
      if (ms != -INFINITY) acc = fmaf(pr[sp * (dv + 2) + e], expf(ms - M), acc);
    }
    out[th * dv + e] = acc * inv;
  }
}

}  // namespace

int attention_part_floats(int64_t T, int64_t Hq, int64_t dv) {
  return static_cast<int>(T * Hq * std::max(kMaxSplits, kGqaMaxSplits) * (dv + 2));
}

void attention(float* out, const float* q, const void* k, const void* v, bool kv_bf16, const float* allowed,
               int64_t T, int64_t Hq, int64_t d, int64_t S, int64_t Hkv, int64_t dv, int64_t q0, float scale,
               float* part, cudaStream_t s) {
  if (T == 0 || Hq == 0) return;
  const std::string what = "attention q[" + std::to_string(T) + ", " + std::to_string(Hq) + ", " +
                           std::to_string(d) + "] kv[" + std::to_string(S) + ", " + std::to_string(Hkv) +
                           ", " + std::to_string(dv) + "]" + (kv_bf16 ? " bf16" : "");
  if (dv > kThreads * kMaxDvPerThread) BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": dv > 512");
  if (flash_attention_applies(T, Hq, d, Hkv, dv, kv_bf16, q, k, v, out))
    return flash_attention(out, q, k, v, kv_bf16, allowed, T, Hq, d, S, Hkv, q0, scale, s);
  if (part && T * Hq < 264 && gqa_decode_applies(Hq, d, Hkv, dv, kv_bf16, q, k, part))
    return gqa_decode_attention(out, q, k, v, kv_bf16, allowed, T, Hq, d, S, Hkv, dv, q0, scale, part, s);
  // Few (t, h) blocks over a long cache (decode): split the keys into chunks of kSplitKeys so the card fills,
  // then merge. Prompts have T·Hq blocks already.
  const int64_t S_used = q0 + T;
  int splits = 1;
  if (part && T * Hq < 264 && S_used > 2 * kSplitKeys)
    splits = static_cast<int>(std::min<int64_t>(kMaxSplits, (S_used + kSplitKeys - 1) / kSplitKeys));
  const int64_t chunk = splits == 1 ? S_used : (S_used + splits - 1) / splits;
  const int64_t chunk_tiles = (chunk + kTile - 1) / kTile * kTile;  // splits start on tile boundaries
  splits = static_cast<int>((S_used + chunk_tiles - 1) / chunk_tiles);
  const dim3 grid(static_cast<unsigned>(Hq), static_cast<unsigned>(T), static_cast<unsigned>(splits));
  const int64_t keys = splits == 1 ? S_used : chunk_tiles;
  float* const parts = splits == 1 ? nullptr : part;
  if (kv_bf16)
    pdl_launch(attention_k<__nv_bfloat16>, grid, kThreads, d * sizeof(float), s, out, q,
               static_cast<const __nv_bfloat16*>(k), static_cast<const __nv_bfloat16*>(v), allowed, Hq, d, S,
               Hkv, dv, q0, scale, keys, parts);
  else
    pdl_launch(attention_k<float>, grid, kThreads, d * sizeof(float), s, out, q, static_cast<const float*>(k),
               static_cast<const float*>(v), allowed, Hq, d, S, Hkv, dv, q0, scale, keys, parts);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
  if (splits > 1) {
    pdl_launch(attention_combine, static_cast<unsigned>(T * Hq), 128, 0, s, out, part, splits, dv);
    BLOOMERY_CUDA_CHECK_LAUNCH(what + " combine of " + std::to_string(splits) + " splits");
  }
  return;
}

}  // namespace bloomery::cuda
