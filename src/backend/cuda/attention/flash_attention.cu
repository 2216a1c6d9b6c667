// Prompt attention on the tensor cores (flash attention, FA2 order): the same product as attention_k in
// attention.cu — softmax(q·kᵀ · scale) · v over the causal keys j ≤ q0 + t, narrowed by the optional allowed
// mask [T, S] (QSA's sparse selection) — for prompts, where attention_k's scalar f32 block per (head, token)
// took 450 ms of a 4,096-token prompt on the H200 (docs/performance.md). Hand-written because the mask is an
// arbitrary per-(token, key) selection, which no library attention on sm_90 takes with split activations.
//
// Shape of the work. A block owns 64 query tokens of one query head (4 warps, 16 tokens each) and walks the
// key tiles of its KV head in 32-key steps, double-buffered through cp.async; a warp computes its 16 × 32
// scores with mma.sync m16n8k16, masks them, updates its running max and sum per row (online softmax in f32)
// and adds P · V into a 16 × D f32 accumulator held in registers. Keys are read once per 64 queries instead
// of once per query, from BF16 copies made once per call (round_activations_bf16, as the prompt GEMMs).
//
// Accuracy. Every operand is split into BF16 hi + lo = x − hi (about 16 significant bits of the f32 value)
// and each product takes the three terms hi·hi + hi·lo + lo·hi (the lo·lo term is below 2^-16 relative), so a
// score carries a relative error of about 2^-15 of Σ|q·k| and the probabilities and values likewise, where
// plain BF16 would carry 2^-8: the same hi + lo scheme as the prompt GEMMs' default mode, here on both
// operands because both are activations. Accumulation and the softmax are f32.
//
// A BF16 cache (-ctk/-ctv) is already the hi copy of its values, exactly, and their lo is zero: the kernel
// (kKvLo = false) reads it straight from the cache, without the rounding pass or its copies, and skips the
// K/V lo loads and the products by K/V lo (hi·hi + lo·hi remain). Shared memory then holds no lo tiles, which
// also fits d = 128 into a GB10's 99 KB. Q and P stay split: they are f32 activations.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "backend/cuda/attention/flash_attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/gemm/gemm_internal.h"
#include "backend/cuda/misc/mma.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/misc/shared_memory.h"

namespace bloomery::cuda {
namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kBQ = kWarps * 16;  // query tokens per block
constexpr int kBK = 32;           // keys per tile
constexpr int kPad = 8;  // BF16 elements of padding per shared row: rows 16 bytes off the bank period

template <int D, bool kKvLo>
struct Smem {
  static constexpr int kRow = D + kPad;  // BF16 elements per shared row
  // Q hi, Q lo [kBQ][kRow]; then two stages of K hi, K lo, V hi, V lo [kBK][kRow] (no lo tiles without
  // kKvLo: K hi, V hi).
  static constexpr int kQ = kBQ * kRow;
  static constexpr int kTile = kBK * kRow;
  static constexpr int kParts = kKvLo ? 4 : 2;
  static constexpr int kStage = kParts * kTile;
  static constexpr int kVhi = kKvLo ? 2 : 1;  // V hi's tile within a stage
  static constexpr size_t kBytes = (2 * static_cast<size_t>(kQ) + 2 * static_cast<size_t>(kStage)) * 2;
};

// c0, c1 += A · B for the two n8 tiles of one ldmatrix.x4 of B, with A and B split into hi + lo: hi·hi +
// lo·hi, then hi·lo (B's hi and lo loaded one at a time: d = 256 runs at the register limit). kTrans: B is
// stored k-major (V: keys × dims), else n-major (K: keys × dims, keys being n). Without kBLo, B's lo is zero
// (a BF16 cache): its load and products are skipped.
template <bool kTrans, bool kBLo>
__device__ __forceinline__ void mma_split_x4(float (&c0)[4], float (&c1)[4], const uint32_t (&ahi)[4],
                                             const uint32_t (&alo)[4], const void* bhi, const void* blo) {
  uint32_t b[4];
  if constexpr (kTrans)
    ldmatrix_x4_trans(b, bhi);
  else
    ldmatrix_x4(b, bhi);
  mma_bf16(c0, ahi, b[0], b[1]);
  mma_bf16(c0, alo, b[0], b[1]);
  mma_bf16(c1, ahi, b[2], b[3]);
  mma_bf16(c1, alo, b[2], b[3]);
  if constexpr (kBLo) {
    if constexpr (kTrans)
      ldmatrix_x4_trans(b, blo);
    else
      ldmatrix_x4(b, blo);
    mma_bf16(c0, ahi, b[0], b[1]);
    mma_bf16(c1, ahi, b[2], b[3]);
  }
}

// (lo, hi) floats as a bf16x2 word, and the rounding residues as a second word.
__device__ __forceinline__ void split_pair(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

struct FlashArgs {
  float* out;
  const float* q;
  const __nv_bfloat16 *khi, *klo, *vhi, *vlo;  // [S, Hkv, D]; klo, vlo null for a BF16 cache
  const float* allowed;                        // [T, S] or null
  int64_t T, Hq, S, Hkv, q0;
  float scale;
};

// kKvLo: K and V come as BF16 hi + lo copies of an f32 cache; without it, a BF16 cache is K/V hi (lo = 0).
template <int D, bool kKvLo>
__global__ void __launch_bounds__(kThreads) flash_attention_k(const FlashArgs a) {
  using L = Smem<D, kKvLo>;
  constexpr int kRow = L::kRow;
  extern __shared__ __align__(16) __nv_bfloat16 sm[];
  __nv_bfloat16* qhi = sm;
  __nv_bfloat16* qlo = sm + L::kQ;
  __nv_bfloat16* stage0 = sm + 2 * L::kQ;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  // Later query tiles see more keys: start them first so the last wave is the short tiles.
  const int64_t qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, kh = h / (a.Hq / a.Hkv);
  const int64_t t0 = qt * kBQ;
  const int64_t s_used = a.q0 + a.T;
  const int64_t last_key = std::min(a.q0 + t0 + kBQ - 1, s_used - 1);
  const int ntiles = static_cast<int>(last_key / kBK) + 1;

  pdl_wait();
  pdl_launch_dependents();

  // One key tile (hi, lo of K and V; hi only without kKvLo) into stage `st`: each thread copies one 16-byte
  // chunk column of every kRowsPerPass-th row; rows past the cache are zero-filled (their scores are masked,
  // so they add nothing).
  const __nv_bfloat16* const src[4] = {a.khi, kKvLo ? a.klo : a.vhi, a.vhi, a.vlo};  // the stage's tiles
  const auto load_tile = [&](int kt, int st) {
    constexpr int kChunks = D / 8, kRowsPerPass = kThreads / kChunks;
    __nv_bfloat16* base = stage0 + st * L::kStage + (threadIdx.x % kChunks) * 8;
#pragma unroll 1
    for (int r = threadIdx.x / kChunks; r < kBK; r += kRowsPerPass) {
      const int64_t j = static_cast<int64_t>(kt) * kBK + r;
      const bool in = j < s_used;
      const int64_t off = ((in ? j : 0) * a.Hkv + kh) * D + (threadIdx.x % kChunks) * 8;
#pragma unroll
      for (int part = 0; part < L::kParts; ++part)
        cp_async16(base + part * L::kTile + r * kRow, src[part] + off, in);
    }
  };
  load_tile(0, 0);
  cp_async_commit();

  // Q hi / lo for the block's tokens (rows past T repeat row T − 1; they are never stored).
  for (int c = threadIdx.x; c < kBQ * (D / 4); c += kThreads) {
    const int r = c / (D / 4), e = (c % (D / 4)) * 4;
    const int64_t t = std::min<int64_t>(t0 + r, a.T - 1);
    const float4 x = *reinterpret_cast<const float4*>(a.q + (t * a.Hq + h) * D + e);
    uint2 hi, lo;
    split_pair(x.x, x.y, hi.x, lo.x);
    split_pair(x.z, x.w, hi.y, lo.y);
    *reinterpret_cast<uint2*>(qhi + r * kRow + e) = hi;
    *reinterpret_cast<uint2*>(qlo + r * kRow + e) = lo;
  }

  // This thread's two query rows (g and g + 8 of the warp's 16).
  const int64_t tr[2] = {t0 + warp * 16 + g, t0 + warp * 16 + g + 8};
  const float* arow[2] = {nullptr, nullptr};  // the rows' selection masks
  if (a.allowed)
    for (int ri = 0; ri < 2; ++ri) arow[ri] = a.allowed + (tr[ri] < a.T ? tr[ri] : 0) * a.S;
  const int64_t warp_last_key = a.q0 + t0 + warp * 16 + 15;  // the warp's last visible key (causal)
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int kt = 0; kt < ntiles; ++kt) {
    if (kt + 1 < ntiles) {
      load_tile(kt + 1, (kt + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int64_t j0 = static_cast<int64_t>(kt) * kBK;
    if (j0 <= warp_last_key) {  // a tile wholly past the warp's causal limit adds nothing
      const __nv_bfloat16* st = stage0 + (kt & 1) * L::kStage;
      // (klo, vlo point into the stage only with kKvLo; without it they are never read.)
      const __nv_bfloat16 *khi = st, *klo = st + L::kTile, *vhi = st + L::kVhi * L::kTile,
                          *vlo = st + 3 * L::kTile;
      // S = Q Kᵀ over D in k-steps of 16: four n8 tiles of keys.
      float s[4][4] = {};
#pragma unroll 2
      for (int ks = 0; ks < D / 16; ++ks) {  // (partly unrolled: D = 256 spilled fully unrolled)
        uint32_t ah[4], al[4];
        const int qr = warp * 16 + (lane & 15), qc = ks * 16 + (lane >> 4) * 8;
        ldmatrix_x4(ah, qhi + qr * kRow + qc);
        ldmatrix_x4(al, qlo + qr * kRow + qc);
#pragma unroll
        for (int np = 0; np < 2; ++np) {  // two n8 tiles per ldmatrix.x4
          const int mi = lane >> 3;
          const int kr = np * 16 + (mi >> 1) * 8 + (lane & 7), kc = ks * 16 + (mi & 1) * 8;
          mma_split_x4<false, kKvLo>(s[np * 2], s[np * 2 + 1], ah, al, khi + kr * kRow + kc,
                                     klo + kr * kRow + kc);
        }
      }
      // Scale, mask (causal, cache end, selection) and the online softmax update, per row.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int ri = c >> 1;
          const int64_t t = tr[ri], j = j0 + nt * 8 + tq * 2 + (c & 1);
          bool vis = t < a.T && j <= a.q0 + t;
          if (vis && arow[ri]) vis = arow[ri][j] != 0.0f;
          const float v = vis ? s[nt][c] * a.scale : -INFINITY;
          s[nt][c] = v;
          mx[ri] = fmaxf(mx[ri], v);
        }
      float corr[2];
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) {
        mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xFFFFFFFFu, mx[ri], 1));
        mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xFFFFFFFFu, mx[ri], 2));
        const float m_new = fmaxf(m[ri], mx[ri]);
        corr[ri] = m_new == -INFINITY ? 1.0f : (m[ri] == -INFINITY ? 0.0f : expf(m[ri] - m_new));
        m[ri] = m_new;
      }
      float rs[2] = {0.0f, 0.0f};
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int ri = c >> 1;
          const float p = s[nt][c] == -INFINITY ? 0.0f : expf(s[nt][c] - m[ri]);
          s[nt][c] = p;
          rs[ri] += p;
        }
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) l[ri] = l[ri] * corr[ri] + rs[ri];
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][0] *= corr[0], o[i][1] *= corr[0];
        o[i][2] *= corr[1], o[i][3] *= corr[1];
      }
      // O += P V over the tile's keys in k-steps of 16: P's accumulator layout is the A operand's.
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        uint32_t ph[4], pl[4];
        split_pair(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
        split_pair(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
        split_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
        split_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {  // two n8 tiles of the value dims per ldmatrix.x4
          const int mi = lane >> 3;
          const int vr = kk * 16 + (mi & 1) * 8 + (lane & 7), vc = np * 16 + (mi >> 1) * 8;
          mma_split_x4<true, kKvLo>(o[np * 2], o[np * 2 + 1], ph, pl, vhi + vr * kRow + vc,
                                    vlo + vr * kRow + vc);
        }
      }
    }
    __syncthreads();  // the stage just read is the next load's target
  }

  // Row sums across the quad, then out = O / l (a row with no visible key gives zeros).
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    l[ri] += __shfl_xor_sync(0xFFFFFFFFu, l[ri], 1);
    l[ri] += __shfl_xor_sync(0xFFFFFFFFu, l[ri], 2);
  }
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const int64_t t = tr[ri];
    if (t >= a.T) continue;
    const float inv = l[ri] > 0.0f ? 1.0f / l[ri] : 0.0f;
    float* orow = a.out + (t * a.Hq + h) * D;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<float2*>(orow + i * 8 + tq * 2) =
          make_float2(o[i][ri * 2] * inv, o[i][ri * 2 + 1] * inv);
  }
}

std::atomic<bool>& enabled_slot() {
  static std::atomic<bool> on{!env_is("BLOOMERY_CUDA_FLASH_ATTENTION", "0")};
  return on;
}

template <int D, bool kKvLo>
void launch(FlashArgs a, cudaStream_t s) {
  constexpr size_t kBytes = Smem<D, kKvLo>::kBytes;
  opt_in_shared_memory(reinterpret_cast<const void*>(flash_attention_k<D, kKvLo>), static_cast<int>(kBytes),
                       "flash attention");
  const dim3 grid(static_cast<unsigned>((a.T + kBQ - 1) / kBQ), static_cast<unsigned>(a.Hq));
  pdl_launch(flash_attention_k<D, kKvLo>, grid, kThreads, kBytes, s, a);
}

template <bool kKvLo>
void launch_d(int64_t d, const FlashArgs& a, cudaStream_t s) {
  switch (d) {
    case 32:
      return launch<32, kKvLo>(a, s);
    case 64:
      return launch<64, kKvLo>(a, s);
    case 128:
      return launch<128, kKvLo>(a, s);
    default:
      return launch<256, kKvLo>(a, s);
  }
}

template <bool kKvLo>
size_t smem_bytes(int64_t d) {
  return d == 32    ? Smem<32, kKvLo>::kBytes
         : d == 64  ? Smem<64, kKvLo>::kBytes
         : d == 128 ? Smem<128, kKvLo>::kBytes
         : d == 256 ? Smem<256, kKvLo>::kBytes
                    : 0;
}

}  // namespace

bool flash_attention_enabled() {
  return enabled_slot().load(std::memory_order_relaxed);
}

void set_flash_attention(bool on) {
  enabled_slot().store(on, std::memory_order_relaxed);
}

bool flash_attention_applies(int64_t T, int64_t Hq, int64_t d, int64_t Hkv, int64_t dv, bool kv_bf16,
                             const float* q, const void* k, const void* v, const float* out) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!flash_attention_enabled() || T < kFlashMinTokens || d != dv || Hkv <= 0 || Hq % Hkv != 0 ||
      !aligned(q) || !aligned(k) || !aligned(v) || !aligned(out))
    return false;
  const size_t bytes = kv_bf16 ? smem_bytes<false>(d) : smem_bytes<true>(d);
  // The device's shared memory per block (227 KB on sm_90; about 99 KB on a GB10, where d = 256 keeps the
  // scalar kernel until a smaller tile exists, and d = 128 with an f32 cache).
  int dev = 0, optin = 0;
  BLOOMERY_CUDA_CHECK(cudaGetDevice(&dev), "flash attention: current device");
  BLOOMERY_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                      "flash attention: shared memory per block");
  return bytes > 0 && bytes <= static_cast<size_t>(optin);
}

void flash_attention(float* out, const float* q, const void* k, const void* v, bool kv_bf16,
                     const float* allowed, int64_t T, int64_t Hq, int64_t d, int64_t S, int64_t Hkv,
                     int64_t q0, float scale, cudaStream_t s) {
  const std::string what = "flash attention q[" + std::to_string(T) + ", " + std::to_string(Hq) + ", " +
                           std::to_string(d) + "] kv[" + std::to_string(S) + ", " + std::to_string(Hkv) +
                           "]" + (kv_bf16 ? " bf16" : "");
  if (kv_bf16) {  // the cache is the hi operand as it stands
    const auto* kb = static_cast<const __nv_bfloat16*>(k);
    const auto* vb = static_cast<const __nv_bfloat16*>(v);
    launch_d<false>(d, FlashArgs{out, q, kb, nullptr, vb, nullptr, allowed, T, Hq, S, Hkv, q0, scale}, s);
    BLOOMERY_CUDA_CHECK_LAUNCH(what);
    return;
  }
  // The keys and values this call reads, rounded once into BF16 hi / lo copies (the prompt GEMMs' split,
  // gemm_internal.h: hi rows, then lo rows, in one stream-ordered allocation each).
  const int64_t rows = (q0 + T) * Hkv, n = rows * d;
  auto* kb = static_cast<const __nv_bfloat16*>(
      round_activations_bf16(static_cast<const float*>(k), rows, d, true, s));
  auto* vb = static_cast<const __nv_bfloat16*>(
      round_activations_bf16(static_cast<const float*>(v), rows, d, true, s));
  launch_d<true>(d, FlashArgs{out, q, kb, kb + n, vb, vb + n, allowed, T, Hq, S, Hkv, q0, scale}, s);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
  BLOOMERY_CUDA_CHECK(cudaFreeAsync(const_cast<__nv_bfloat16*>(kb), s), what + ": free the BF16 keys");
  BLOOMERY_CUDA_CHECK(cudaFreeAsync(const_cast<__nv_bfloat16*>(vb), s), what + ": free the BF16 values");
}

}  // namespace bloomery::cuda
