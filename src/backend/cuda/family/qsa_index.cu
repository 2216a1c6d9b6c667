// qwen4_exp QSA block indexer on the card (models.md §3.8): pooling completed blocks of raw indexer keys, the
// block scores of every query, and the stable top-k block selection written as an allowed[T, S] mask.
//
// Exactness: the selection is a hard cut, so a score that differs from the CPU backend's by one ulp can flip
// a block. Every block key and every score is therefore computed with the CPU op's operations in the CPU op's
// order, each rounded on its own (__fmul_rn / __fadd_rn: no FMA contraction), which makes them bit-identical
// to the CPU backend's (the CPU build targets baseline x86-64: no FMA there either). The only libm calls
// (powf, cosf, sinf of the block RoPE) are made on the host by the launcher's caller.
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/qwen4_kernels.h"
#include "backend/cuda/misc/mma.cuh"  // cp_async16
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

// ---- block pooling -------------------------------------------------------------------------------------

// One CTA per completed block. Shared: mean[d], y[d].
__global__ void qsa_pool_k(float* blocks, const float* raw, const float* w, const float* cs, const float* sn,
                           int64_t b0, int d, int c, int rot, float eps) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ float sh[];
  float* mean = sh;
  float* y = sh + d;
  __shared__ float inv_s;
  const int64_t bi = blockIdx.x, b = b0 + bi, first = b * c;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0.0f;
    for (int m = 0; m < c; ++m) acc = __fadd_rn(acc, raw[(first + m) * d + j]);
    mean[j] = __fdiv_rn(acc, static_cast<float>(c));
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // Σx² in f64, in index order, as the CPU's grouped_rmsnorm1p
    double ss = 0.0;
    for (int j = 0; j < d; ++j) {
      const double x = mean[j];
      ss = __dadd_rn(ss, __dmul_rn(x, x));
    }
    const float ms = __double2float_rn(__ddiv_rn(ss, static_cast<double>(d)));
    inv_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, eps)));
  }
  __syncthreads();
  const float inv = inv_s;
  for (int j = threadIdx.x; j < d; j += blockDim.x)
    y[j] = __fmul_rn(__fmul_rn(mean[j], inv), __fadd_rn(1.0f, w[j]));
  __syncthreads();
  const int half = rot / 2;
  const float* cb = cs + bi * half;
  const float* sb = sn + bi * half;
  float* out = blocks + b * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float v = y[j];
    if (j < half) {  // x[i] = a·c − b·s
      v = __fsub_rn(__fmul_rn(y[j], cb[j]), __fmul_rn(y[j + half], sb[j]));
    } else if (j < rot) {  // x[i + half] = b·c + a·s
      const int i = j - half;
      v = __fadd_rn(__fmul_rn(y[j], cb[i]), __fmul_rn(y[i], sb[i]));
    }
    out[j] = v;
  }
}

// ---- block scores --------------------------------------------------------------------------------------

// A CTA scores kTQ queries against kTB blocks, one head at a time, over d in chunks of kTJ staged in shared
// memory. Thread (tq, tb) owns query tq and blocks tb, tb + 16, tb + 32, tb + 48; each dot accumulates in
// index order j = 0 … d−1 exactly as the CPU loop does.
constexpr int kTQ = 16, kTB = 64, kTJ = 32, kScoreThreads = 256;

__global__ void __launch_bounds__(kScoreThreads)
    qsa_scores_k(float* scores, int64_t ld, const float* qi, const float* blocks, int64_t T, int Hi, int d,
                 int64_t q_first, int c, float inv) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float Qs[kTQ][kTJ + 1];
  __shared__ float Ks[kTB][kTJ + 1];
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTQ;
  const int64_t b_base = static_cast<int64_t>(blockIdx.x) * kTB;
  const int64_t t_last = (t0 + kTQ < T ? t0 + kTQ : T) - 1;
  const int64_t nb_hi = (q_first + t_last + 1) / c;  // blocks the tile's last (latest) query sees
  if (b_base >= nb_hi) return;                       // causally empty tile (whole CTA, before any barrier)
  const int tq = threadIdx.x / 16, tb = threadIdx.x % 16;
  float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int h = 0; h < Hi; ++h) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j0 = 0; j0 < d; j0 += kTJ) {
      const int w = d - j0 < kTJ ? d - j0 : kTJ;
      for (int e = threadIdx.x; e < kTQ * kTJ; e += kScoreThreads) {
        const int r = e / kTJ, cc = e % kTJ;
        const int64_t tr = t0 + r;
        Qs[r][cc] = (tr < T && cc < w) ? qi[(tr * Hi + h) * d + j0 + cc] : 0.0f;
      }
      for (int e = threadIdx.x; e < kTB * kTJ; e += kScoreThreads) {
        const int r = e / kTJ, cc = e % kTJ;
        const int64_t br = b_base + r;
        Ks[r][cc] = (br < nb_hi && cc < w) ? blocks[br * d + j0 + cc] : 0.0f;
      }
      __syncthreads();
      for (int jj = 0; jj < w; ++jj) {
        const float q = Qs[tq][jj];
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(q, Ks[tb + 16 * i][jj]));
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) total[i] = __fadd_rn(total[i], acc[i] < 0.0f ? 0.0f : acc[i]);  // std::max
  }
  const int64_t t = t0 + tq;
  if (t >= T) return;
  const int64_t nb = (q_first + t + 1) / c;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t b = b_base + tb + 16 * i;
    if (b < nb) scores[t * ld + b] = __fmul_rn(total[i], inv);
  }
}

// ---- block scores, few queries (decode, speculative verify) --------------------------------------------

// At T ≤ kTQ the tiled kernel above runs one row of nb/kTB CTAs (16 at a depth of 4096), each doing the work
// of kTQ queries whatever T is: 37 µs on an H200 at T = 1. Here a CTA scores one query (blockIdx.y) against
// kSB consecutive blocks, whose rows are one contiguous run of `blocks`: it is copied coalesced into shared
// memory once, with the query's Hi rows. Thread (hs, r) runs block r's dots for heads hs, hs + kSH, … — each
// in index order j = 0 … d−1 — and thread (0, r) sums the heads in order h = 0 … Hi−1: the tiled kernel's and
// the CPU's operations, in their order. Its cost grows with T (the keys are read once per query) while the
// tiled kernel's does not up to kTQ, so it takes T ≤ kSmallT = kTQ: decode and speculative verify steps.
constexpr int kSmallT = kTQ, kSB = 32, kSH = 4, kSmallThreads = kSB * kSH;

// kVec (d % 4 == 0, 16-byte aligned rows): every copy is a cp.async of 16 bytes, all in flight at once, and
// the dots read float4s; a key row stride ≡ 4 (mod 8) floats keeps each 8-lane phase of a float4 read on
// distinct banks. Otherwise: plain copies and an odd stride (one column is conflict-free across the lanes).
template <bool kVec>
__host__ __device__ constexpr int small_ldk(int d) {
  return kVec ? (d & ~7) + 4 : (d | 1);
}

template <bool kVec>
size_t small_scores_smem(int Hi, int d) {
  return (static_cast<size_t>(kSB) * small_ldk<kVec>(d) + static_cast<size_t>(Hi) * d +
          static_cast<size_t>(Hi) * kSB) *
         sizeof(float);
}

// nrows rows of `row` floats, contiguous at src, into dst rows of stride ldk; W floats a copy.
template <bool kVec>
__device__ __forceinline__ void stage_rows(float* dst, int ldk, const float* src, int nrows, int row) {
  constexpr int W = kVec ? 4 : 1;
  const int dw = row / W, n = nrows * dw, step_r = kSmallThreads / dw, step_j = kSmallThreads % dw;
  int r = threadIdx.x / dw, j = threadIdx.x % dw;
  for (int e = threadIdx.x; e < n; e += kSmallThreads) {
    if constexpr (kVec) {
      cp_async16(dst + r * ldk + j * W, src + static_cast<int64_t>(e) * W, true);
    } else {
      dst[r * ldk + j] = src[e];
    }
    r += step_r;
    j += step_j;
    if (j >= dw) {
      j -= dw;
      ++r;
    }
  }
}

// Shared: keys [kSB][ldk], query [Hi][d], relu(dot) [Hi][kSB].
template <bool kVec>
__global__ void __launch_bounds__(kSmallThreads)
    qsa_scores_small_k(float* __restrict__ scores, int64_t ld, const float* __restrict__ qi,
                       const float* __restrict__ blocks, int Hi, int d, int64_t q_first, int c, float inv) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ __align__(16) float sh[];
  const int ldk = small_ldk<kVec>(d);
  float* Ks = sh;
  float* Qs = Ks + kSB * ldk;
  float* Ps = Qs + Hi * d;
  const int64_t t = blockIdx.y;
  const int64_t b_base = static_cast<int64_t>(blockIdx.x) * kSB;
  const int64_t nb = (q_first + t + 1) / c;
  if (b_base >= nb) return;  // causally empty (whole CTA, before any barrier)
  const int rows = nb - b_base < kSB ? static_cast<int>(nb - b_base) : kSB;
  stage_rows<kVec>(Ks, ldk, blocks + b_base * d, rows, d);
  stage_rows<kVec>(Qs, d, qi + t * Hi * d, Hi, d);
  if constexpr (kVec) {
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();
  const int r = threadIdx.x % kSB, hs = threadIdx.x / kSB;
  if (r < rows) {
    const float* kr = Ks + r * ldk;
    for (int h = hs; h < Hi; h += kSH) {
      const float* qh = Qs + h * d;  // the same address in every lane: a broadcast
      float acc = 0.0f;
      if constexpr (kVec) {
#pragma unroll 4
        for (int j = 0; j < d; j += 4) {
          const float4 q = *reinterpret_cast<const float4*>(qh + j);
          const float4 k = *reinterpret_cast<const float4*>(kr + j);
          acc = __fadd_rn(acc, __fmul_rn(q.x, k.x));
          acc = __fadd_rn(acc, __fmul_rn(q.y, k.y));
          acc = __fadd_rn(acc, __fmul_rn(q.z, k.z));
          acc = __fadd_rn(acc, __fmul_rn(q.w, k.w));
        }
      } else {
#pragma unroll 8
        for (int j = 0; j < d; ++j) acc = __fadd_rn(acc, __fmul_rn(qh[j], kr[j]));
      }
      Ps[h * kSB + r] = acc < 0.0f ? 0.0f : acc;  // std::max
    }
  }
  __syncthreads();
  if (hs == 0 && r < rows) {
    float total = 0.0f;
    for (int h = 0; h < Hi; ++h) total = __fadd_rn(total, Ps[h * kSB + r]);
    scores[t * ld + b_base + r] = __fmul_rn(total, inv);
  }
}

// ---- stable top-k selection ----------------------------------------------------------------------------

constexpr int kSelThreads = 512;

// Unsigned key with the order of the float (−0 taken as +0: the CPU compares them equal).
__device__ __forceinline__ uint32_t order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One CTA per query. An MSB-first radix select (4 passes of 8 bits, histogram in shared memory) finds the
// k-th largest key thr and how many of the blocks equal to thr are taken (need); then one pass in block-index
// order takes every block above thr and the first `need` blocks equal to thr (a block-wide ballot scan),
// which is exactly the set the CPU's stable sort keeps.
__global__ void __launch_bounds__(kSelThreads)
    qsa_select_k(float* allowed, int64_t S, const float* scores, int64_t ld, int64_t q_first, int c,
                 int block_topk, int* ties) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ unsigned hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int64_t s_need;
  __shared__ int s_tie;
  __shared__ int warp_cnt[kSelThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  const int64_t t = blockIdx.x;
  const int64_t vis = q_first + t + 1, nb = vis / c, body = nb * c;
  const int64_t k = block_topk < nb ? block_topk : nb;
  const float* sc = scores + t * ld;
  float* row = allowed + t * S;
  if (k >= nb || k <= 0) {  // every complete block (fewer than block_topk exist) or none
    const float v = k >= nb ? 1.0f : 0.0f;
    for (int64_t p = tid; p < body; p += kSelThreads) row[p] = v;
  } else {
    uint32_t prefix = 0, mask = 0;
    int64_t remaining = k;
    int tie = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kSelThreads) hist[i] = 0;
      __syncthreads();
      // Scores of one query share their top bits, so most keys land in a few bins: lanes with the same digit
      // are counted by one atomic (__match_any_sync) instead of queueing on the same shared-memory word.
      for (int64_t base = 0; base < nb; base += kSelThreads) {
        const int64_t b = base + tid;
        const uint32_t key = b < nb ? order_key(sc[b]) : 0u;
        const uint32_t digit = (b < nb && (key & mask) == prefix) ? (key >> shift) & 255u : 256u;
        const unsigned peers = __match_any_sync(0xFFFFFFFFu, digit);
        if (digit < 256u && lane == __ffs(peers) - 1)
          atomicAdd(&hist[digit], static_cast<unsigned>(__popc(peers)));
      }
      __syncthreads();
      // Warp 0 finds the digit holding the remaining-th largest key; lane l scans digits 255−8l … 248−8l.
      if (wid == 0) {
        unsigned loc[8], sum = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) sum += (loc[i] = hist[255 - (lane * 8 + i)]);
        unsigned incl = sum;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const unsigned up = __shfl_up_sync(0xFFFFFFFFu, incl, o);
          if (lane >= o) incl += up;
        }
        int64_t cum = incl - sum;
        if (cum < remaining && remaining <= static_cast<int64_t>(incl)) {  // exactly one lane
          for (int i = 0; i < 8; ++i) {
            if (cum + loc[i] >= remaining) {
              s_prefix = prefix | (static_cast<uint32_t>(255 - (lane * 8 + i)) << shift);
              s_need = remaining - cum;
              s_tie = static_cast<int64_t>(loc[i]) > remaining - cum;  // last pass: the count equal to thr
              break;
            }
            cum += loc[i];
          }
        }
      }
      __syncthreads();
      prefix = s_prefix;
      remaining = s_need;
      tie = s_tie;
      mask |= 255u << shift;
    }
    const uint32_t thr = prefix;
    const int64_t need = remaining;
    if (tid == 0 && tie) atomicAdd(ties, 1);
    int64_t taken = 0;  // blocks equal to thr before this chunk
    for (int64_t base = 0; base < nb; base += kSelThreads) {
      const int64_t b = base + tid;
      const uint32_t key = b < nb ? order_key(sc[b]) : 0u;
      const bool eq = b < nb && key == thr;
      const unsigned ballot = __ballot_sync(0xFFFFFFFFu, eq);
      __syncthreads();  // the previous chunk's readers of warp_cnt are done
      if (lane == 0) warp_cnt[wid] = __popc(ballot);
      __syncthreads();
      int64_t before = 0, chunk = 0;
      for (int w = 0; w < kSelThreads / 32; ++w) {
        before += w < wid ? warp_cnt[w] : 0;
        chunk += warp_cnt[w];
      }
      const int64_t rank = taken + before + __popc(ballot & ((1u << lane) - 1u));
      if (b < nb) {
        const float v = (key > thr || (eq && rank < need)) ? 1.0f : 0.0f;
        for (int m = 0; m < c; ++m) row[b * c + m] = v;
      }
      taken += chunk;
    }
  }
  for (int64_t p = body + tid; p < S; p += kSelThreads) row[p] = p < vis ? 1.0f : 0.0f;  // tail, future
}

}  // namespace

void qsa_pool_blocks(float* blocks, const float* raw, const float* k_norm, const float* cs, const float* sn,
                     int64_t b0, int64_t nblk, int d, int c, int rot, float eps, cudaStream_t s) {
  if (nblk <= 0) return;
  pdl_launch(qsa_pool_k, static_cast<unsigned>(nblk), 128, 2 * d * sizeof(float), s, blocks, raw, k_norm, cs,
             sn, b0, d, c, rot, eps);
  BLOOMERY_CUDA_CHECK_LAUNCH("qsa_pool_blocks blocks " + std::to_string(b0) + "+" + std::to_string(nblk) +
                             " × " + std::to_string(d) + " compress " + std::to_string(c));
}

void qsa_block_scores(float* scores, int64_t ld, const float* qi, const float* blocks, int64_t T, int Hi,
                      int d, int64_t q_first, int c, float inv, cudaStream_t s) {
  const int64_t nb_max = (q_first + T) / c;
  if (T <= 0 || nb_max <= 0) return;
  if (T <= kSmallT && d > 0) {
    const bool vec = d % 4 == 0 && reinterpret_cast<uintptr_t>(qi) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(blocks) % 16 == 0;
    const size_t smem = vec ? small_scores_smem<true>(Hi, d) : small_scores_smem<false>(Hi, d);
    if (smem <= 48 * 1024) {  // the default dynamic shared memory; larger shapes take the tiled kernel
      const dim3 grid(static_cast<unsigned>((nb_max + kSB - 1) / kSB), static_cast<unsigned>(T));
      pdl_launch(vec ? qsa_scores_small_k<true> : qsa_scores_small_k<false>, grid, kSmallThreads, smem, s,
                 scores, ld, qi, blocks, Hi, d, q_first, c, inv);
      BLOOMERY_CUDA_CHECK_LAUNCH("qsa_block_scores (few queries) qi [" + std::to_string(T) + ", " +
                                 std::to_string(Hi) + ", " + std::to_string(d) + "] blocks " +
                                 std::to_string(nb_max) + (vec ? "" : " scalar"));
      return;
    }
  }
  const dim3 grid(static_cast<unsigned>((nb_max + kTB - 1) / kTB),
                  static_cast<unsigned>((T + kTQ - 1) / kTQ));
  pdl_launch(qsa_scores_k, grid, kScoreThreads, 0, s, scores, ld, qi, blocks, T, Hi, d, q_first, c, inv);
  BLOOMERY_CUDA_CHECK_LAUNCH("qsa_block_scores qi [" + std::to_string(T) + ", " + std::to_string(Hi) + ", " +
                             std::to_string(d) + "] blocks " + std::to_string(nb_max));
}

void qsa_select_blocks(float* allowed, int64_t S, const float* scores, int64_t ld, int64_t T, int64_t q_first,
                       int c, int block_topk, int* ties, cudaStream_t s) {
  if (T <= 0) return;
  pdl_launch(qsa_select_k, static_cast<unsigned>(T), kSelThreads, 0, s, allowed, S, scores, ld, q_first, c,
             block_topk, ties);
  BLOOMERY_CUDA_CHECK_LAUNCH("qsa_select_blocks allowed [" + std::to_string(T) + ", " + std::to_string(S) +
                             "] topk " + std::to_string(block_topk));
}

}  // namespace bloomery::cuda
