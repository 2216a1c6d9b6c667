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

// Chunks a lane loads before using any: 8 (32 bytes of FP8, 64 of BF16, in flight).
constexpr int kRowAhead = 8;

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

// One block's rows of y = e(x · W[row0 : row0 + n]ᵀ) for one row of x (x [1, K], y [1, n]): ks warps share
// a weight row, warp wk taking chunks wk, wk + ks, …; their partial sums are added in warp order (fixed, so
// the bits repeat). `block` is the block's index within this product (a grouped launch runs several products
// in one grid).
// Why one weight row a warp and one row of x: 2 or 4 weight rows a warp against one load of x, and 2-4 rows
// of x against the same weight loads, were built and measured slower or not better on an H100
// (docs/performance.md); 2-8 rows of x take the tensor-core GEMV by default (gemv_tc.cu).
template <RowKind KD, int kWarpsPerBlock>
__device__ __forceinline__ void row_block(const DeviceWeight& w, int64_t row0, int64_t n,
                                          const float* __restrict__ x, float* __restrict__ y, int ks,
                                          const Epilogue& e, int64_t block) {
  constexpr int A = kRowAhead;
  constexpr bool kFp8 = KD == RowKind::Fp8;
  using Bits = std::conditional_t<kFp8, uint32_t, uint2>;  // a lane's 4 elements of a chunk
  __shared__ float part[kWarpsPerBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / ks, wk = warp % ks;
  const int64_t r = block * (kWarpsPerBlock / ks) + group;  // the warp's row of this product
  const bool active = r < n;
  const int chunks = static_cast<int>(w.cols / kRowChunk);
  constexpr int64_t kElemBytes = kFp8 ? 1 : 2;
  // A warp past the product reads row 0's address and loads nothing; its sum is never stored.
  const int64_t row = active ? row0 + r : 0;
  const Bits* wq =
      reinterpret_cast<const Bits*>(static_cast<const uint8_t*>(w.data) + row * w.cols * kElemBytes) + lane;
  RowScale sc{};
  if constexpr (kFp8)
    if (active) sc = RowScale::of(w, row);
  const int sub = lane >> 3;  // the lane's 32-element scale chunk within a 128-element chunk
  Bits q[A];
  uint32_t sr[A];
  const auto load = [&](int j0) {
#pragma unroll
    for (int i = 0; i < A; ++i) {
      const int j = j0 + i * ks;
      const bool in = active && j < chunks;
      q[i] = in ? __ldg(wq + j * 32) : Bits{};
      if constexpr (kFp8) sr[i] = in ? sc.raw(4 * j + sub) : 0u;
    }
  };
  // The first batch is read before waiting for the previous kernel (weights never change), so that read
  // overlaps its tail (misc/pdl.cuh); x and y are touched only after the wait.
  load(wk);
  pdl_wait();
  pdl_launch_dependents();
  const float4* xv = reinterpret_cast<const float4*>(x) + lane;
  float acc = 0.0f;
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
      acc = row_add<KD>(acc, row_quad<KD>(q[i], xs[i]), sc, sr[i]);
    }
  }
  const float s = warp_reduce_sum(acc);
  if (ks == 1) {
    if (lane == 0 && active) store_product(e, 0, y + r, s);
    return;
  }
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (wk != 0 || lane != 0 || !active) return;
  float sum = 0.0f;
  for (int i = 0; i < ks; ++i) sum += part[group * ks + i];
  store_product(e, 0, y + r, sum);
}

}  // namespace bloomery::cuda
