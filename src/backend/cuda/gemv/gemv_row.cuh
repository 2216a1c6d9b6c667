// One row of x against a BF16 or FP8-family weight (MXFP8, FP8 per-tensor, per-channel, block with tiles a
// multiple of 32 wide), K a multiple of 128: the decode step's one-row products. Device part of gemv.cu's
// one-row kernels.
//
// Why not the split-K kernel: there a lane reads a 16-byte unit (16 FP8 or 8 BF16 elements) and the floats of
// x behind it, so a warp's x loads are 64 (32) bytes apart per lane and each spans 16 (8) cache lines; for a
// one-byte element that L1 traffic, not DRAM, bounds the product (the launch sweep read MXFP8 at a quarter of
// the copy rate, half of BF16's per byte). Here a lane reads 4 elements of each 128-element chunk (a word of
// FP8, two of BF16) and the float4 of x behind them: a warp's weight load is 128 (256) contiguous bytes and
// its x load 512, the fewest L1 wavefronts for the bytes. An E4M3 pair becomes an f16 pair in one conversion
// (exact: every E4M3 value is an f16), then two f32 (weight_access.cuh's decoders); the chunk's scale
// multiplies the lane's 4-element partial sum.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cuda/gemv/fp8_row_scale.cuh"
#include "backend/cuda/gemv/gemv_store.cuh"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {

constexpr int kRowChunk = 128;  // k elements a warp reads with one load (32 lanes × 4)

// Rows of x the kernel takes at most: 1, or kRowMultiMax (a verify's or a few slots' rows, T ≤ 4), where each
// row of x is read against the same weight loads with that row's own terms, order and reduction, so every row
// of y has the bits the one-row kernel gives it alone (decode and verify rows agree bit for bit).
constexpr int kRowMultiMax = 4;

// Weight rows one warp reads against the same loads of x: 1, 2 or 4. With R rows a lane's float4 of x serves
// R weight words, so the x traffic per weight byte (4 bytes of x per FP8 element at R = 1, which costs an
// MXFP8 product what a BF16 one costs per element) drops R-fold. Each row's terms, order and reduction do not
// depend on R: the bits are R = 1's under the same split-K ways.
constexpr bool valid_row_rows(int r) {
  return r == 1 || r == 2 || r == 4;
}
// Chunks a lane loads before using any, per row: 8 (32 bytes of FP8, 64 of BF16, in flight) up to two rows,
// 4 at four rows (the registers of 4 × 8 chunks would cost resident warps).
constexpr int row_ahead(int rows) {
  return rows <= 2 ? 8 : 4;
}

// The element kinds the one-row kernel reads.
enum class RowKind { Bf16, Fp8 };

// The kind w takes on the one-row kernel, if any (BF16; the FP8 family with a scale per 32-element chunk),
// for K a multiple of 128 and x 16-byte aligned (rows then start 128-element aligned).
inline bool row_kind_of(const DeviceWeight& w, const float* x, RowKind& kind) {
  if (w.cols == 0 || w.cols % kRowChunk != 0 || w.cols > (1u << 30) ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w.data) % 8 != 0)
    return false;
  if (w.format == FormatId::BF16) {
    kind = RowKind::Bf16;
    return true;
  }
  kind = RowKind::Fp8;
  return RowScale::fits(w);
}

// Split-K ways for `row_groups` warp row groups of `chunks` chunks: as many warps as the card holds at once,
// each with at least half a batch of chunks.
inline int row_split(int64_t row_groups, int64_t chunks, int max_ways, int ahead) {
  constexpr int64_t kWarpsWanted = 132 * 32;  // H200: 132 SMs × 32 resident warps
  int ks = 1;
  while (ks < max_ways && row_groups * ks < kWarpsWanted && chunks / (2 * ks) >= ahead / 2) ks *= 2;
  return ks;
}

// The partial sum of one lane's 4 elements of a chunk (its stored bits q) against x's float4 there, as the
// one-row kernel forms it (the product of the first pair, then FMAs in element order).
template <RowKind KD, class Bits>
__device__ __forceinline__ float row_quad(const Bits& q, const float4& xq) {
  float4 v;
  if constexpr (KD == RowKind::Fp8)
    v = e4m3x4_to_f32(q);
  else
    v = bf16x4_to_f32(q);
  float p = __fmul_rn(v.x, xq.x);
  p = fmaf(v.y, xq.y, p);
  p = fmaf(v.z, xq.z, p);
  return fmaf(v.w, xq.w, p);
}

// A chunk's partial sum into a row's accumulator: scaled by the chunk's FP8 scale (raw bits sr), or added.
template <RowKind KD>
__device__ __forceinline__ float row_add(float acc, float p, const RowScale& sc, uint32_t sr) {
  if constexpr (KD == RowKind::Fp8)
    return fmaf(sc.value(sr), p, acc);
  else
    return acc + p;
}

// row_rows for one weight row a warp and T ≤ kRowMultiMax rows of x: the weight chunks come through `load`
// (q, sr: the row's A chunks ahead), each row of x keeps its own accumulator with the one-row kernel's terms
// and order, and the split-K partials are reduced in warp order per row.
template <RowKind KD, int kWarpsPerBlock, int A, class Bits, class Load>
__device__ __forceinline__ void row_rows_multi(Bits (&q)[A], uint32_t (&sr)[A], const RowScale& sc,
                                               Load&& load, const float4* xv, int chunks, int wk, int ks,
                                               bool active, int rows_here, int64_t r_first, int64_t n,
                                               float* __restrict__ y, const Epilogue& e, float* part, int T,
                                               uint32_t K) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t x_row = K / 4;  // float4s from one row of x to the next
  float acc[kRowMultiMax];
#pragma unroll
  for (int t = 0; t < kRowMultiMax; ++t) acc[t] = 0.0f;
  for (int j0 = wk; active && j0 < chunks; j0 += ks * A) {
    if (j0 != wk) load(j0);
#pragma unroll
    for (int i = 0; i < A; ++i) {
      const int j = j0 + i * ks;
      if (j >= chunks) break;
      float4 xq[kRowMultiMax];
#pragma unroll
      for (int t = 0; t < kRowMultiMax; ++t)
        if (t < T) xq[t] = __ldg(xv + t * x_row + j * 32);
#pragma unroll
      for (int t = 0; t < kRowMultiMax; ++t) {
        if (t >= T) break;
        acc[t] = row_add<KD>(acc[t], row_quad<KD>(q[i], xq[t]), sc, sr[i]);
      }
    }
  }
  float s[kRowMultiMax];
#pragma unroll
  for (int t = 0; t < kRowMultiMax; ++t) s[t] = t < T ? warp_reduce_sum(acc[t]) : 0.0f;
  if (ks == 1) {
    if (lane == 0 && rows_here > 0)
#pragma unroll
      for (int t = 0; t < kRowMultiMax; ++t)
        if (t < T) store_product(e, t, y + t * n + r_first, s[t]);
    return;
  }
  if (lane == 0)
#pragma unroll
    for (int t = 0; t < kRowMultiMax; ++t) part[warp * kRowMultiMax + t] = s[t];
  __syncthreads();
  const int group = warp / ks;
  if (wk != 0 || lane >= T || rows_here == 0) return;
  float sum = 0.0f;  // lane t sums row t's partials in warp order
  for (int i = 0; i < ks; ++i) sum += part[(group * ks + i) * kRowMultiMax + lane];
  store_product(e, lane, y + lane * n + r_first, sum);
}

// One block's rows of y = e(x · W[row0 : row0 + n]ᵀ) for T ≤ TM rows of x (x [T, K], y [T, n]): ks warps
// share a group of R weight rows, warp wk taking chunks wk, wk + ks, …; their partial sums are added in warp
// order (fixed, so the bits repeat). `block` is the block's index within this product (a grouped launch runs
// several products in one grid). TM = 1 holds a batch of x in registers; TM > 1 reads each row's float4 of x
// at use (L1-resident), since A chunks × TM rows of it would not fit the registers.
template <RowKind KD, int kWarpsPerBlock, int R, int TM = 1>
__device__ __forceinline__ void row_rows(const DeviceWeight& w, int64_t row0, int64_t n,
                                         const float* __restrict__ x, float* __restrict__ y, int ks,
                                         const Epilogue& e, int64_t block, int T = 1) {
  static_assert(valid_row_rows(R));
  static_assert(TM == 1 || (TM == kRowMultiMax && R == 1), "several rows of x: one weight row a warp");
  constexpr int A = row_ahead(R);
  constexpr bool kFp8 = KD == RowKind::Fp8;
  using Bits = std::conditional_t<kFp8, uint32_t, uint2>;  // a lane's 4 elements of a chunk
  __shared__ float part[kWarpsPerBlock * R * TM];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / ks, wk = warp % ks;
  const int64_t r_first = (block * (kWarpsPerBlock / ks) + group) * R;
  const bool active = r_first < n;
  const int rows_here = active ? static_cast<int>(n - r_first < R ? n - r_first : R) : 0;
  const int chunks = static_cast<int>(w.cols / kRowChunk);
  constexpr int64_t kElemBytes = kFp8 ? 1 : 2;
  // Rows past the product read row 0's address and load nothing; their sums are never stored.
  const Bits* wq[R];
  RowScale sc[R];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) {
    const int64_t row = rr < rows_here ? row0 + r_first + rr : 0;
    wq[rr] =
        reinterpret_cast<const Bits*>(static_cast<const uint8_t*>(w.data) + row * w.cols * kElemBytes) + lane;
    sc[rr] = RowScale{};
    if constexpr (kFp8)
      if (rr < rows_here) sc[rr] = RowScale::of(w, row);
  }
  const int sub = lane >> 3;  // the lane's 32-element scale chunk within a 128-element chunk
  Bits q[R][A];
  uint32_t sr[R][A];
  const auto load = [&](int j0) {
#pragma unroll
    for (int i = 0; i < A; ++i) {
      const int j = j0 + i * ks;
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        const bool in = rr < rows_here && j < chunks;
        q[rr][i] = in ? __ldg(wq[rr] + j * 32) : Bits{};
        if constexpr (kFp8) sr[rr][i] = in ? sc[rr].raw(4 * j + sub) : 0u;
      }
    }
  };
  // The first batch is read before waiting for the previous kernel (weights never change), so that read
  // overlaps its tail (misc/pdl.cuh); x and y are touched only after the wait.
  load(wk);
  pdl_wait();
  pdl_launch_dependents();
  const float4* xv = reinterpret_cast<const float4*>(x) + lane;
  if constexpr (TM > 1) {
    row_rows_multi<KD, kWarpsPerBlock, A>(q[0], sr[0], sc[0], load, xv, chunks, wk, ks, active, rows_here,
                                          r_first, n, y, e, part, T, w.cols);
  } else {
    float acc[R];
#pragma unroll
    for (int rr = 0; rr < R; ++rr) acc[rr] = 0.0f;
    for (int j0 = wk; active && j0 < chunks; j0 += ks * A) {
      if (j0 != wk) load(j0);
      float4 xs[A];
#pragma unroll
      for (int i = 0; i < A; ++i) {
        const int j = j0 + i * ks;
        xs[i] = j < chunks ? __ldg(xv + j * 32) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int i = 0; i < A; ++i) {
        if (j0 + i * ks >= chunks) break;
#pragma unroll
        for (int rr = 0; rr < R; ++rr)
          acc[rr] = row_add<KD>(acc[rr], row_quad<KD>(q[rr][i], xs[i]), sc[rr], sr[rr][i]);
      }
    }
    float s[R];
#pragma unroll
    for (int rr = 0; rr < R; ++rr) s[rr] = warp_reduce_sum(acc[rr]);
    if (ks == 1) {
      if (lane == 0)
#pragma unroll
        for (int rr = 0; rr < R; ++rr)
          if (rr < rows_here) store_product(e, 0, y + r_first + rr, s[rr]);
      return;
    }
    if (lane == 0)
#pragma unroll
      for (int rr = 0; rr < R; ++rr) part[warp * R + rr] = s[rr];
    __syncthreads();
    if (wk != 0 || lane != 0) return;
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      if (rr >= rows_here) break;
      float sum = 0.0f;
      for (int i = 0; i < ks; ++i) sum += part[(group * ks + i) * R + rr];
      store_product(e, 0, y + r_first + rr, sum);
    }
  }
}

}  // namespace bloomery::cuda
