// Decode attention by KV head: the split-KV product of cuda::attention for few query rows (decode steps, MTP
// verify rows), one block per (KV head, split of the keys, query row) that scores and sums for all G query
// heads of the GQA group.
//
// Why not the per-query-head kernel (attention.cu): measured with Nsight Compute on an H200 (qwen4_exp, 24
// query heads over 2 KV heads, d 256, QSA mask keeping half of 4,097 keys), it took 58.6 µs a layer plus
// 33 µs to merge its splits: every K and V row was read by 12 blocks, and V rows the mask leaves out were
// read anyway. Here each K and V row is read once per group, keys the mask leaves out are not read, and the
// merge computes the splits' weights once per row with all threads.
//
// Work of a block, tile by tile (64 keys): eight lanes share a key (lane s of the eight holds float4s
// s, s + 8, … of the row, so a key is one 1 KB coalesced read at d 256 and the eight lanes' q reads from
// shared memory are conflict-free); their partial dots for all G heads are summed by three shuffles. The
// tile's scores then take an online softmax in f32 per head (running max and sum), and thread (e, head
// group) accumulates o[head][e] over the tile's visible keys, V loads 16 ahead. The block's (o, m, l) per
// head go to `part`; gqa_combine_k merges the splits as attention_combine does.
//
// A BF16 cache (-ctk/-ctv) keeps the pattern with 16-byte chunks of 8 elements (lane s holds chunks s, s + 8,
// … : still one coalesced read of the row, half the bytes), widened exactly to f32 before the same dots; the
// group's q is stored in shared memory permuted so that a lane's two float4s of a chunk stay conflict-free.
// V is read per element as before, 2 bytes each. Scores, softmax and merge are the f32 kernel's.
#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>

#include "backend/cuda/attention/decode_attention.h"
#include "backend/cuda/attention/kv_load.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kLanesPerKey = 8, kKeysPerPass = kWarps * (32 / kLanesPerKey);  // 32 keys a pass
constexpr int kTile = 2 * kKeysPerPass;                                       // 64 keys a tile
constexpr int kMaxGroup = 16;                                                 // query heads per KV head
constexpr int kVAhead = 16;                                                   // V loads in flight a thread
constexpr int kCombineThreads = 128;
static_assert(kGqaMaxSplits <= kCombineThreads, "the merge holds one split per thread");

// Where float4 i of a head's q row sits in shared memory. f32 keys: in place. BF16 keys: lane s of the eight
// reads chunk m = c·8 + s (8 elements, float4s 2m and 2m + 1 of q); stored at c·16 + h·8 + s (h = 0, 1),
// each of its two float4 reads is the eight lanes' 128 contiguous bytes (in place, 2m and 2m + 1 fall
// 32 bytes apart per lane: two-way bank conflicts).
template <bool kBf16>
__device__ __forceinline__ int q_slot(int i) {
  if constexpr (kBf16) {
    const int m = i >> 1;
    return (m / kLanesPerKey) * (2 * kLanesPerKey) + (i & 1) * kLanesPerKey + m % kLanesPerKey;
  } else {
    return i;
  }
}

// Grid (Hkv · splits, T). Dynamic shared memory: q of the group [G, D] then the tile's scores [G, kTile].
// KV: float or __nv_bfloat16 (the cache's element).
template <int D, typename KV>
__global__ void __launch_bounds__(kThreads)
    gqa_decode_k(float* __restrict__ part, const float* __restrict__ q, const KV* __restrict__ k,
                 const KV* __restrict__ v, const float* __restrict__ allowed, int Hq, int G, int64_t S,
                 int Hkv, int dv, int64_t q0, float scale, int64_t chunk, int splits) {
  constexpr bool kBf16 = sizeof(KV) == 2;
  // A lane's loads of a key row: float4s (f32) or uint4s of 8 BF16 elements, kVec of them.
  using Chunk = std::conditional_t<kBf16, uint4, float4>;
  constexpr int kVec = D * static_cast<int>(sizeof(KV)) / (16 * kLanesPerKey);
  static_assert(kVec >= 1, "a d-32 BF16 cache takes the per-query-head kernel (gqa_decode_applies)");
  extern __shared__ float4 sm4[];
  float4* qs4 = sm4;                                      // [G][D / 4]
  float* sc = reinterpret_cast<float*>(sm4 + G * D / 4);  // [G][kTile]
  __shared__ int ok[kTile];
  __shared__ float m_s[kMaxGroup], l_s[kMaxGroup], corr_s[kMaxGroup];
  pdl_wait();
  pdl_launch_dependents();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, quarter = lane / kLanesPerKey,
            sub = lane % kLanesPerKey;
  const int kh = blockIdx.x / splits, sp = blockIdx.x % splits;
  const int64_t t = blockIdx.y;
  const float4* q4 = reinterpret_cast<const float4*>(q + (t * Hq + static_cast<int64_t>(kh) * G) * D);
  for (int i = tid; i < G * D / 4; i += kThreads) qs4[i - i % (D / 4) + q_slot<kBf16>(i % (D / 4))] = q4[i];
  if (tid < G) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;
  const int64_t jb = sp * chunk, je_all = q0 + t + 1;
  const int64_t je = jb + chunk < je_all ? jb + chunk : je_all;
  const float* arow = allowed ? allowed + t * S : nullptr;
  // Thread (e, hg) owns o[hg + i·HG][e]: HG head groups of dv threads.
  const int HG = kThreads / dv, e = tid % dv, hg = tid / dv;
  float o[kMaxGroup] = {};
  __syncthreads();
  for (int64_t j0 = jb; j0 < je; j0 += kTile) {
    // Scores: a lane's two keys of the tile, all loads out before any is used.
    Chunk kr[2][kVec];
    bool valid[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int jj = i * kKeysPerPass + warp * (32 / kLanesPerKey) + quarter;
      const int64_t j = j0 + jj;
      valid[i] = j < je && !(arow && arow[j] == 0.0f);
      const Chunk* kr4 = reinterpret_cast<const Chunk*>(k + (j * Hkv + kh) * D);
#pragma unroll
      for (int c = 0; c < kVec; ++c) kr[i][c] = valid[i] ? __ldg(kr4 + c * kLanesPerKey + sub) : Chunk{};
      if (sub == 0) ok[jj] = valid[i];
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int jj = i * kKeysPerPass + warp * (32 / kLanesPerKey) + quarter;
      for (int g = 0; g < G; ++g) {
        const float4* qg = qs4 + g * (D / 4);
        float p = 0.0f;
#pragma unroll
        for (int c = 0; c < kVec; ++c) {
          if constexpr (kBf16) {
            const uint4 b = kr[i][c];
            const float4 a0 = qg[c * 2 * kLanesPerKey + sub],
                         a1 = qg[c * 2 * kLanesPerKey + kLanesPerKey + sub];
            p = fmaf(a0.x, bf16_lo(b.x), p), p = fmaf(a0.y, bf16_hi(b.x), p);
            p = fmaf(a0.z, bf16_lo(b.y), p), p = fmaf(a0.w, bf16_hi(b.y), p);
            p = fmaf(a1.x, bf16_lo(b.z), p), p = fmaf(a1.y, bf16_hi(b.z), p);
            p = fmaf(a1.z, bf16_lo(b.w), p), p = fmaf(a1.w, bf16_hi(b.w), p);
          } else {
            const float4 a = qg[c * kLanesPerKey + sub], b = kr[i][c];
            p = fmaf(a.x, b.x, p), p = fmaf(a.y, b.y, p), p = fmaf(a.z, b.z, p), p = fmaf(a.w, b.w, p);
          }
        }
        p += __shfl_xor_sync(0xFFFFFFFFu, p, 4);
        p += __shfl_xor_sync(0xFFFFFFFFu, p, 2);
        p += __shfl_xor_sync(0xFFFFFFFFu, p, 1);
        if (sub == 0) sc[g * kTile + jj] = valid[i] ? p * scale : -INFINITY;
      }
    }
    __syncthreads();
    // Online softmax per head: a warp per head, two keys a lane.
    for (int g = warp; g < G; g += kWarps) {
      const float s0 = sc[g * kTile + lane], s1 = sc[g * kTile + 32 + lane];
      const float m_old = m_s[g], m_new = fmaxf(m_old, warp_reduce_max(fmaxf(s0, s1)));
      float p0 = 0.0f, p1 = 0.0f, corr = 1.0f;
      if (m_new != -INFINITY) {  // something visible so far
        corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        p0 = s0 == -INFINITY ? 0.0f : expf(s0 - m_new);
        p1 = s1 == -INFINITY ? 0.0f : expf(s1 - m_new);
      }
      sc[g * kTile + lane] = p0, sc[g * kTile + 32 + lane] = p1;
      const float sum = warp_reduce_sum(p0 + p1);
      if (lane == 0) l_s[g] = l_s[g] * corr + sum, m_s[g] = m_new, corr_s[g] = corr;
    }
    __syncthreads();
    // o = o · corr + P V over the tile's visible keys.
    if (hg < HG) {
#pragma unroll
      for (int i = 0; i < kMaxGroup; ++i) {
        const int g = hg + i * HG;
        if (g < G) o[i] *= corr_s[g];
      }
      const KV* vt = v + (j0 * Hkv + kh) * static_cast<int64_t>(dv) + e;
      const int64_t vstride = static_cast<int64_t>(Hkv) * dv;
      for (int jj0 = 0; jj0 < kTile; jj0 += kVAhead) {
        float vv[kVAhead];
#pragma unroll
        for (int u = 0; u < kVAhead; ++u) vv[u] = ok[jj0 + u] ? ldg_kv(vt + (jj0 + u) * vstride) : 0.0f;
#pragma unroll
        for (int u = 0; u < kVAhead; u += 4) {
#pragma unroll
          for (int i = 0; i < kMaxGroup; ++i) {
            const int g = hg + i * HG;
            if (g >= G) break;
            const float4 p = *reinterpret_cast<const float4*>(sc + g * kTile + jj0 + u);  // one broadcast
            o[i] = fmaf(p.x, vv[u], o[i]), o[i] = fmaf(p.y, vv[u + 1], o[i]);
            o[i] = fmaf(p.z, vv[u + 2], o[i]), o[i] = fmaf(p.w, vv[u + 3], o[i]);
          }
        }
      }
    }
    __syncthreads();  // sc and ok are the next tile's
  }
  if (hg < HG) {
#pragma unroll
    for (int i = 0; i < kMaxGroup; ++i) {
      const int g = hg + i * HG;
      if (g < G) part[((t * Hq + kh * G + g) * splits + sp) * (dv + 2) + e] = o[i];
    }
  }
  if (tid < G) {
    float* pr = part + ((t * Hq + kh * G + tid) * splits + sp) * (dv + 2);
    pr[dv] = m_s[tid], pr[dv + 1] = l_s[tid];
  }
}

// Merges the splits of one (t, h): M = max m_s, L = Σ l_s e^{m_s − M}, out = Σ o_s e^{m_s − M} / L; the
// weights once per row (a thread per split), then every output element with all threads.
__global__ void __launch_bounds__(kCombineThreads)
    gqa_combine_k(float* __restrict__ out, const float* __restrict__ part, int splits, int dv) {
  __shared__ float w[kCombineThreads], red[33];
  pdl_wait();
  pdl_launch_dependents();
  const int64_t th = blockIdx.x;
  const float* pr = part + th * splits * (dv + 2);
  const int tid = threadIdx.x;
  const float m = tid < splits ? pr[tid * (dv + 2) + dv] : -INFINITY;
  const float M = block_reduce_max(m, red);
  const float ws = m == -INFINITY ? 0.0f : expf(m - M);
  w[tid] = ws;
  const float L = block_reduce_sum(tid < splits ? ws * pr[tid * (dv + 2) + dv + 1] : 0.0f, red);
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int e = tid; e < dv; e += kCombineThreads) {
    float acc = 0.0f;
#pragma unroll 8
    for (int s = 0; s < splits; ++s) acc = fmaf(w[s], pr[s * (dv + 2) + e], acc);
    out[th * dv + e] = acc * inv;
  }
}

std::atomic<bool>& enabled_slot() {
  static std::atomic<bool> on{!env_is("BLOOMERY_CUDA_GQA_DECODE", "0")};
  return on;
}

template <int D, typename KV>
void launch(float* part, const float* q, const void* k, const void* v, const float* allowed, int64_t T,
            int Hq, int G, int64_t S, int Hkv, int dv, int64_t q0, float scale, int64_t chunk, int splits,
            size_t smem, cudaStream_t s) {
  pdl_launch(gqa_decode_k<D, KV>, dim3(static_cast<unsigned>(Hkv * splits), static_cast<unsigned>(T)),
             kThreads, smem, s, part, q, static_cast<const KV*>(k), static_cast<const KV*>(v), allowed, Hq, G,
             S, Hkv, dv, q0, scale, chunk, splits);
}

template <typename KV>
void launch_d(int64_t d, float* part, const float* q, const void* k, const void* v, const float* allowed,
              int64_t T, int Hq, int G, int64_t S, int Hkv, int dv, int64_t q0, float scale, int64_t chunk,
              int splits, size_t smem, cudaStream_t s) {
  switch (d) {
    case 32:
      if constexpr (sizeof(KV) == 4)  // no BF16 instantiation (gqa_decode_applies)
        launch<32, KV>(part, q, k, v, allowed, T, Hq, G, S, Hkv, dv, q0, scale, chunk, splits, smem, s);
      break;
    case 64:
      launch<64, KV>(part, q, k, v, allowed, T, Hq, G, S, Hkv, dv, q0, scale, chunk, splits, smem, s);
      break;
    case 128:
      launch<128, KV>(part, q, k, v, allowed, T, Hq, G, S, Hkv, dv, q0, scale, chunk, splits, smem, s);
      break;
    default:
      launch<256, KV>(part, q, k, v, allowed, T, Hq, G, S, Hkv, dv, q0, scale, chunk, splits, smem, s);
  }
}

}  // namespace

bool gqa_decode_enabled() {
  return enabled_slot().load(std::memory_order_relaxed);
}

void set_gqa_decode(bool on) {
  enabled_slot().store(on, std::memory_order_relaxed);
}

bool gqa_decode_applies(int64_t Hq, int64_t d, int64_t Hkv, int64_t dv, bool kv_bf16, const float* q,
                        const void* k, const float* part) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const auto pow2_dim = [](int64_t x) { return x == 32 || x == 64 || x == 128 || x == 256; };
  // d 32 with a BF16 cache falls back to the per-query-head kernel: 4 chunks of 8 elements a row would
  // leave half of a key's eight lanes idle, and such heads are rare enough not to earn an instantiation.
  return gqa_decode_enabled() && part && Hkv > 0 && Hq % Hkv == 0 && Hq / Hkv <= kMaxGroup && pow2_dim(d) &&
         pow2_dim(dv) && !(kv_bf16 && d == 32) && aligned(q) && aligned(k);
}

void gqa_decode_attention(float* out, const float* q, const void* k, const void* v, bool kv_bf16,
                          const float* allowed, int64_t T, int64_t Hq, int64_t d, int64_t S, int64_t Hkv,
                          int64_t dv, int64_t q0, float scale, float* part, cudaStream_t s) {
  // Splits of whole tiles, as many as fill the card (up to kGqaMaxSplits; one tile each up to 8K keys).
  const int64_t S_used = q0 + T, tiles = (S_used + kTile - 1) / kTile;
  const int64_t per_split = (tiles + kGqaMaxSplits - 1) / kGqaMaxSplits;
  const int64_t chunk = per_split * kTile;
  const int splits = static_cast<int>((S_used + chunk - 1) / chunk);
  const int G = static_cast<int>(Hq / Hkv);
  const size_t smem = static_cast<size_t>(G) * (d + kTile) * sizeof(float);
  const std::string what = "gqa decode attention q[" + std::to_string(T) + ", " + std::to_string(Hq) + ", " +
                           std::to_string(d) + "] kv[" + std::to_string(S) + ", " + std::to_string(Hkv) +
                           ", " + std::to_string(dv) + "]" + (kv_bf16 ? " bf16" : "") + " splits " +
                           std::to_string(splits);
  const int hq = static_cast<int>(Hq), hkv = static_cast<int>(Hkv), dvi = static_cast<int>(dv);
  if (kv_bf16 && d == 32) BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": d 32 with a BF16 cache");
  if (kv_bf16)
    launch_d<__nv_bfloat16>(d, part, q, k, v, allowed, T, hq, G, S, hkv, dvi, q0, scale, chunk, splits, smem,
                            s);
  else
    launch_d<float>(d, part, q, k, v, allowed, T, hq, G, S, hkv, dvi, q0, scale, chunk, splits, smem, s);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
  pdl_launch(gqa_combine_k, static_cast<unsigned>(T * Hq), kCombineThreads, 0, s, out, part, splits, dvi);
  BLOOMERY_CUDA_CHECK_LAUNCH(what + " combine");
}

}  // namespace bloomery::cuda
