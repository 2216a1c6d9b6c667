// Decode GEMV on stored-format weights: y[t, r] = Σ_k x[t, k] · W[row0 + r, k] for 1 ≤ T ≤ 8 rows of x. Lanes
// read units of stored elements (16 bytes; 8 for FP4), decode them in registers and multiply them into all T
// rows, so the weight is read once for every row of x. Hand-written because the weights stay in their stored
// formats (NVFP4, MXFP8, FP8 blocks), which no library GEMV reads.
//
// Two kernels, chosen by gemv_variant() (BLOOMERY_CUDA_GEMV=1|2, default 2; the bench's --ab gemv flips it):
//  1. gemv_units: a warp per R rows, one unit per lane per iteration, the element values fully scaled.
//  2. gemv_split: a block of 8 warps, ks of them sharing R rows (split-K, partial sums reduced in shared
//     memory in a fixed order, so results are reproducible) for shapes with few rows (HC inject [4, 10240],
//     GDN a/b [48, 2560], the router), U units per lane loaded before any is used (more bytes in flight), and
//     the unit's scale applied once to its 16-element partial sum (NVFP4's global once to the row's sum): the
//     f32 arithmetic per element falls from three multiplies and an FMA to one FMA, which keeps FP4 rows
//     memory-bound. The weights are the stored ones; only the summation order differs from variant 1.
//     With R rows per warp (3-8 rows of x) each x float4 is loaded once for all R (gemv_x_once()).
//     R and ks come from a heuristic, or for launch sweeps from set_gemv_launch_override (tests only).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/gemv/gemv_row.cuh"
#include "backend/cuda/gemv/gemv_store.cuh"
#include "backend/cuda/gemv/gemv_tc.h"
#include "backend/cuda/gemv/unit_dot.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// Each warp owns R consecutive weight rows: a lane loads its unit of every row (several loads in flight),
// then streams x in float4s once for all of them, so x traffic is shared by the rows. Measured on H200: R = 1
// is faster for one or two rows of x (more warps in flight), R = 4 for more (x traffic dominates).
template <Width W, int R>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_units(DeviceWeight w, int64_t row0, int64_t n, const float* __restrict__ x, int T,
               float* __restrict__ y) {
  constexpr int E = Unit<W>::kElems;
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t r0 = (blockIdx.x * static_cast<int64_t>(kWarps) + (threadIdx.x >> 5)) * R;
  if (r0 >= n) return;
  const int rows = n - r0 < R ? static_cast<int>(n - r0) : R;
  const uint64_t K = w.cols, units = K / E;
  float acc[R][kGemvMaxRows] = {};
  for (uint64_t u = lane; u < units; u += 32) {
    float v[R][E];
#pragma unroll
    for (int j = 0; j < R; ++j)
      if (j < rows) decode_unit<W>(w, row0 + r0 + j, u * E, v[j]);
#pragma unroll
    for (int t = 0; t < kGemvMaxRows; ++t) {
      if (t >= T) break;
      const float4* xr = reinterpret_cast<const float4*>(x + t * K + u * E);
#pragma unroll
      for (int i = 0; i < E / 4; ++i) {
        const float4 q = __ldg(xr + i);
#pragma unroll
        for (int j = 0; j < R; ++j) {
          acc[j][t] = fmaf(v[j][4 * i], q.x, acc[j][t]);
          acc[j][t] = fmaf(v[j][4 * i + 1], q.y, acc[j][t]);
          acc[j][t] = fmaf(v[j][4 * i + 2], q.z, acc[j][t]);
          acc[j][t] = fmaf(v[j][4 * i + 3], q.w, acc[j][t]);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < R; ++j)
#pragma unroll
    for (int t = 0; t < kGemvMaxRows; ++t) {
      if (t >= T) break;
      const float s = warp_sum(acc[j][t]);
      if (lane == 0 && j < rows) y[t * n + r0 + j] = s;
    }
}

// Any shape (K not a multiple of the unit, FP8 tiles narrower than 16): element by element.
__global__ void __launch_bounds__(kWarps * 32)
    gemv_elements(DeviceWeight w, int64_t row0, int64_t n, const float* __restrict__ x, int T,
                  float* __restrict__ y) {
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarps) + (threadIdx.x >> 5);
  if (r >= n) return;
  const uint64_t row = row0 + r, K = w.cols;
  float acc[kGemvMaxRows] = {};
  for (uint64_t k = lane; k < K; k += 32) {
    const float v = weight_element(w, row, k);
#pragma unroll
    for (int t = 0; t < kGemvMaxRows; ++t)
      if (t < T) acc[t] = fmaf(v, x[t * K + k], acc[t]);
  }
#pragma unroll
  for (int t = 0; t < kGemvMaxRows; ++t) {
    if (t >= T) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[t * n + r] = s;
  }
}

template <int R>
void launch_units(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y,
                  cudaStream_t s) {
  const int64_t per_block = static_cast<int64_t>(kWarps) * R;
  const unsigned blocks = static_cast<unsigned>((n + per_block - 1) / per_block);
  with_width(width_of(w.format), [&](auto Wc) {
    pdl_launch(gemv_units<decltype(Wc)::value, R>, blocks, kWarps * 32, 0, s, w, row0, n, x, T, y);
  });
}

// ---- variant 2 -----------------------------------------------------------------------------------------

constexpr int kSplitWarps = 8;  // warps per block of gemv_split

// RawUnit / load_unit / unscaled_unit: weight_access.cuh (the unit decoders the routed-expert kernels share).

// Units each lane loads before using any: enough bytes in flight per lane (16 B units: 2, 8 B FP4 units: 4).
template <Width W>
constexpr int kLoadsAhead = W == Width::Fp4 ? 4 : 2;

// One block's rows of y = e(x · W[row0 : row0 + n]ᵀ): `block` is the block's index within this product (a
// grouped launch runs several products' blocks in one grid).
template <Width W, int R, bool kXOnce>
__device__ __forceinline__ void split_rows(const DeviceWeight& w, int64_t row0, int64_t n,
                                           const float* __restrict__ x, int T, float* __restrict__ y, int ks,
                                           const Epilogue& e, int64_t block) {
  constexpr int E = Unit<W>::kElems, U = kLoadsAhead<W>;
  constexpr bool kScaled = W == Width::Fp8 || W == Width::Fp4;
  // The final reduction gives each (weight row, x row) pair one lane.
  static_assert(R * kGemvMaxRows <= 32, "R * T must fit in a warp");
  __shared__ float part[kSplitWarps][R][kGemvMaxRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / ks, wk = warp % ks, groups = kSplitWarps / ks;
  const int64_t r0 = (block * groups + group) * R;
  const bool active = r0 < n;
  const int rows = !active ? 0 : (n - r0 < R ? static_cast<int>(n - r0) : R);
  const uint64_t K = w.cols, units = K / E;
  const uint64_t stride = static_cast<uint64_t>(ks) * 32;
  const bool f16 = w.format == FormatId::F16;
  float acc[R][kGemvMaxRows] = {};
  RawUnit<W> raw[U][R];
  const auto load_batch = [&](uint64_t u0) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const uint64_t u = u0 + i * stride;
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (u < units && j < rows)
          raw[i][j] = load_unit<W>(w, row0 + r0 + j, u * E);
        else
          raw[i][j] = RawUnit<W>{};
      }
    }
  };
  // The first batch of weight units is read before waiting for the previous kernel (weights never change),
  // so that read overlaps its tail (misc/pdl.cuh); x and y are touched only after the wait.
  load_batch(wk * 32 + lane);
  pdl_wait();
  pdl_launch_dependents();
  for (uint64_t u0 = wk * 32 + lane; u0 < units; u0 += stride * U) {
    if (u0 != wk * 32 + lane) load_batch(u0);
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const uint64_t u = u0 + i * stride;
      if (u >= units) break;
      if constexpr (kXOnce) {
        // Each x float4 is loaded once for all R rows (x traffic R times smaller; the same sums, same order).
        float v[R][E];
#pragma unroll
        for (int j = 0; j < R; ++j) unscaled_unit<W>(raw[i][j], f16, v[j]);
#pragma unroll
        for (int t = 0; t < kGemvMaxRows; ++t) {
          if (t >= T) break;
          const float4* xr = reinterpret_cast<const float4*>(x + t * K + u * E);
          float p[R] = {};
#pragma unroll
          for (int e = 0; e < E / 4; ++e) {
            const float4 q = __ldg(xr + e);
#pragma unroll
            for (int j = 0; j < R; ++j) {
              p[j] = fmaf(v[j][4 * e], q.x, p[j]);
              p[j] = fmaf(v[j][4 * e + 1], q.y, p[j]);
              p[j] = fmaf(v[j][4 * e + 2], q.z, p[j]);
              p[j] = fmaf(v[j][4 * e + 3], q.w, p[j]);
            }
          }
#pragma unroll
          for (int j = 0; j < R; ++j)
            acc[j][t] = kScaled ? fmaf(raw[i][j].s, p[j], acc[j][t]) : acc[j][t] + p[j];
        }
        continue;
      }
#pragma unroll
      for (int j = 0; j < R; ++j) unit_dot_rows<W>(raw[i][j], f16, x, K, u * E, T, acc[j]);
    }
  }
  const float post = row_post_scale<W>(w);
#pragma unroll
  for (int j = 0; j < R; ++j)
#pragma unroll
    for (int t = 0; t < kGemvMaxRows; ++t) {
      if (t >= T) break;
      const float s = warp_sum(acc[j][t]);
      if (lane != 0 || j >= rows) continue;
      if (ks == 1)
        store_product(e, t, y + t * n + r0 + j, s * post);
      else
        part[warp][j][t] = s;
    }
  if (ks == 1) return;
  __syncthreads();
  // The group's first warp sums its ks partials in warp order (fixed, so every run gives the same bits).
  const int p = lane, j = p / T, t = p % T;
  if (wk != 0 || j >= rows || p >= R * T) return;
  float s = 0.0f;
  for (int q = 0; q < ks; ++q) s += part[group * ks + q][j][t];
  store_product(e, t, y + t * n + r0 + j, s * post);
}

template <Width W, int R, bool kXOnce>
__global__ void __launch_bounds__(kSplitWarps * 32)
    gemv_split(DeviceWeight w, int64_t row0, int64_t n, const float* __restrict__ x, int T,
               float* __restrict__ y, int ks, Epilogue e) {
  split_rows<W, R, kXOnce>(w, row0, n, x, T, y, ks, e, blockIdx.x);
}

// Up to kGroupMax products of one x in one grid: product i owns blocks [first[i], first[i + 1]).
constexpr int kGroupMax = 4;
struct GroupArgs {
  DeviceWeight w[kGroupMax];
  float* y[kGroupMax];
  Epilogue e[kGroupMax];
  int64_t n[kGroupMax];
  int ks[kGroupMax];
  unsigned first[kGroupMax + 1];
  int count;
};

template <Width W, int R, bool kXOnce>
__global__ void __launch_bounds__(kSplitWarps * 32)
    gemv_group_k(const __grid_constant__ GroupArgs g, const float* __restrict__ x, int T) {
  int i = 0;
  while (i + 1 < g.count && blockIdx.x >= g.first[i + 1]) ++i;
  split_rows<W, R, kXOnce>(g.w[i], 0, g.n[i], x, T, g.y[i], g.ks[i], g.e[i], blockIdx.x - g.first[i]);
}

// One row of x against BF16 or FP8-family weights (gemv_row.cuh), one weight row a warp: a product, or a
// group of them in one grid.
template <RowKind KD>
__global__ void __launch_bounds__(kSplitWarps * 32)
    gemv_row_k(DeviceWeight w, int64_t row0, int64_t n, const float* __restrict__ x, float* __restrict__ y,
               int ks, Epilogue e) {
  row_block<KD, kSplitWarps>(w, row0, n, x, y, ks, e, blockIdx.x);
}

// A group's products on the one-row kernel: both kinds in one grid (the MoE router group and the HC down +
// inject group mix BF16 and MXFP8 products in the qad layout).
struct RowGroupArgs {
  GroupArgs g;
  bool fp8[kGroupMax];
};

__global__ void __launch_bounds__(kSplitWarps * 32)
    gemv_row_group_k(const __grid_constant__ RowGroupArgs a, const float* __restrict__ x) {
  const GroupArgs& g = a.g;
  int i = 0;
  while (i + 1 < g.count && blockIdx.x >= g.first[i + 1]) ++i;
  if (a.fp8[i])
    row_block<RowKind::Fp8, kSplitWarps>(g.w[i], 0, g.n[i], x, g.y[i], g.ks[i], g.e[i],
                                         blockIdx.x - g.first[i]);
  else
    row_block<RowKind::Bf16, kSplitWarps>(g.w[i], 0, g.n[i], x, g.y[i], g.ks[i], g.e[i],
                                          blockIdx.x - g.first[i]);
}

// Warps sharing a row group: split K until the grid has enough warps to cover the card, while every warp
// still gets a full pass of U units per lane.
int split_ways(int64_t row_groups, uint64_t units, int U) {
  constexpr int64_t kWarpsWanted = 132 * 32;  // H200: 132 SMs × 32 resident warps
  int ks = 1;
  while (ks < kSplitWarps && row_groups * ks < kWarpsWanted && units / (2 * ks) >= 32u * U) ks *= 2;
  return ks;
}

// ks_fixed: the split-K ways set by set_gemv_launch_override, 0 for split_ways' choice.
template <Width W, int R>
void launch_split(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y,
                  cudaStream_t s, const Epilogue& e, int ks_fixed) {
  auto* kernel = gemv_split<W, R, false>;
  if constexpr (R > 1)  // one row per warp has nothing to share
    if (gemv_x_once()) kernel = gemv_split<W, R, true>;
  const int64_t row_groups = (n + R - 1) / R;
  const int ks = ks_fixed ? ks_fixed : split_ways(row_groups, w.cols / Unit<W>::kElems, kLoadsAhead<W>);
  const int64_t groups_per_block = kSplitWarps / ks;
  const unsigned blocks = static_cast<unsigned>((row_groups + groups_per_block - 1) / groups_per_block);
  pdl_launch(kernel, blocks, kSplitWarps * 32, 0, s, w, row0, n, x, T, y, ks, e);
}

template <int R>
void launch_split_width(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y,
                        cudaStream_t s, const Epilogue& e, int ks_fixed) {
  with_width(width_of(w.format),
             [&](auto Wc) { launch_split<decltype(Wc)::value, R>(w, row0, n, x, T, y, s, e, ks_fixed); });
}

std::atomic<bool>& x_once_slot() {
  static std::atomic<bool> on{!env_is("BLOOMERY_CUDA_GEMV_X_ONCE", "0")};
  return on;
}

// The launch arguments of up to kGroupMax products of one grid: shape(p) gives a product's row groups (of
// the kernel's rows per warp) and split-K ways; `blocks` gets the grid size.
template <class Shape>
GroupArgs group_args(std::span<const GemvProduct> ps, unsigned& blocks, Shape&& shape) {
  GroupArgs g{};
  g.count = static_cast<int>(ps.size());
  blocks = 0;
  for (int i = 0; i < g.count; ++i) {
    const GemvProduct& p = ps[i];
    const auto [row_groups, ks] = shape(p);
    const int64_t per_block = kSplitWarps / ks;
    g.w[i] = p.w, g.y[i] = p.y, g.e[i] = p.e, g.n[i] = static_cast<int64_t>(p.w.rows), g.ks[i] = ks;
    g.first[i] = blocks;
    blocks += static_cast<unsigned>((row_groups + per_block - 1) / per_block);
  }
  g.first[g.count] = blocks;
  return g;
}

// The products of one width, in launches of up to kGroupMax (ks_fixed as in launch_split).
template <Width W, int R>
void launch_group(std::span<const GemvProduct> ps, const float* x, int T, cudaStream_t s, int ks_fixed) {
  for (size_t at = 0; at < ps.size(); at += kGroupMax) {
    unsigned blocks = 0;
    const GroupArgs g = group_args(
        ps.subspan(at, std::min<size_t>(kGroupMax, ps.size() - at)), blocks, [&](const GemvProduct& p) {
          const int64_t row_groups = (static_cast<int64_t>(p.w.rows) + R - 1) / R;
          const int ks =
              ks_fixed ? ks_fixed : split_ways(row_groups, p.w.cols / Unit<W>::kElems, kLoadsAhead<W>);
          return std::pair{row_groups, ks};
        });
    auto* kernel = gemv_group_k<W, R, false>;
    if constexpr (R > 1)
      if (gemv_x_once()) kernel = gemv_group_k<W, R, true>;
    pdl_launch(kernel, blocks, kSplitWarps * 32, 0, s, g, x, T);
    BLOOMERY_CUDA_CHECK_LAUNCH("gemv group of " + std::to_string(g.count) + " products, first W[" +
                               std::to_string(g.w[0].rows) + ", " + std::to_string(g.w[0].cols) + "] x[" +
                               std::to_string(T) + "]");
  }
}

// The one-row kernel's switches, one per kind (each its own A/B).
std::atomic<bool>& row_slot(RowKind kind) {
  static std::atomic<bool> fp8{!env_is("BLOOMERY_CUDA_GEMV_FP8_ROW", "0")};
  static std::atomic<bool> bf16{!env_is("BLOOMERY_CUDA_GEMV_BF16_ROW", "0")};
  return kind == RowKind::Fp8 ? fp8 : bf16;
}

// Split-K ways of the one-row kernel for n rows of w: ks_fixed when set (launch_split's override), else
// row_split's choice.
int row_ways(const DeviceWeight& w, int64_t n, int ks_fixed) {
  return ks_fixed ? ks_fixed : row_split(n, static_cast<int64_t>(w.cols / kRowChunk), kSplitWarps, kRowAhead);
}

// One product on the one-row kernel (ks_fixed as in launch_split).
void launch_row(RowKind kind, const DeviceWeight& w, int64_t row0, int64_t n, const float* x, float* y,
                cudaStream_t s, const Epilogue& e, int ks_fixed) {
  const int ks = row_ways(w, n, ks_fixed);
  const int64_t per_block = kSplitWarps / ks;
  const unsigned blocks = static_cast<unsigned>((n + per_block - 1) / per_block);
  if (kind == RowKind::Fp8)
    pdl_launch(gemv_row_k<RowKind::Fp8>, blocks, kSplitWarps * 32, 0, s, w, row0, n, x, y, ks, e);
  else
    pdl_launch(gemv_row_k<RowKind::Bf16>, blocks, kSplitWarps * 32, 0, s, w, row0, n, x, y, ks, e);
}

// Products of one x (one row) on the one-row kernel (either kind, in order), in launches of up to kGroupMax
// (ks_fixed as in launch_split).
void launch_row_group(std::span<const GemvProduct> ps, std::span<const RowKind> kinds, const float* x,
                      cudaStream_t s, int ks_fixed) {
  for (size_t at = 0; at < ps.size(); at += kGroupMax) {
    const size_t count = std::min<size_t>(kGroupMax, ps.size() - at);
    RowGroupArgs a{};
    unsigned blocks = 0;
    a.g = group_args(ps.subspan(at, count), blocks, [&](const GemvProduct& p) {
      const int64_t n = static_cast<int64_t>(p.w.rows);
      return std::pair{n, row_ways(p.w, n, ks_fixed)};  // a warp group per weight row
    });
    for (size_t i = 0; i < count; ++i) a.fp8[i] = kinds[at + i] == RowKind::Fp8;
    pdl_launch(gemv_row_group_k, blocks, kSplitWarps * 32, 0, s, a, x);
    BLOOMERY_CUDA_CHECK_LAUNCH("one-row gemv group of " + std::to_string(a.g.count) + " products, first W[" +
                               std::to_string(a.g.w[0].rows) + ", " + std::to_string(a.g.w[0].cols) + "]");
  }
}

int variant_from_env() {
  const char* v = std::getenv("BLOOMERY_CUDA_GEMV");
  return v && std::string(v) == "1" ? 1 : 2;
}

std::atomic<int>& variant_slot() {
  static std::atomic<int> v{variant_from_env()};
  return v;
}

// set_gemv_launch_override's rows per warp (low byte) and split-K ways (above), 0 = the heuristic's: one
// atomic, so a launch never sees half of a change.
std::atomic<int>& launch_override_slot() {
  static std::atomic<int> v{0};
  return v;
}

struct SplitShape {
  int rows_per_warp, ks;  // ks 0: split_ways picks per product
};

// The split-K kernel's launch shape for T rows of x: one weight row a warp for one or two rows of x (more
// warps in flight; 4 at one row, each x float4 loaded once for the four, was measured slower or not better on
// an H100, docs/performance.md), four beyond (x traffic dominates), unless a test fixed them.
SplitShape split_shape(int T) {
  const int v = launch_override_slot().load(std::memory_order_relaxed);
  const int rows = v & 0xFF;
  return {rows ? rows : (T <= 2 ? 1 : 4), v >> 8};
}

// True when a product takes the one-row kernel (its kind in `kind`): switched on for the kind, one row of x
// (2-8 rows take the tensor-core GEMV by default, gemv_row.cuh says why), a format and K it reads, and no
// launch override naming the split-K kernel's rows per warp (split-K ways alone apply to it).
bool takes_row(const DeviceWeight& w, const float* x, int T, RowKind& kind) {
  const bool split_rows_fixed = (launch_override_slot().load(std::memory_order_relaxed) & 0xFF) != 0;
  return T == 1 && gemv_variant() == 2 && !split_rows_fixed && row_kind_of(w, x, kind) &&
         row_slot(kind).load(std::memory_order_relaxed);
}

}  // namespace

int gemv_variant() {
  return variant_slot().load(std::memory_order_relaxed);
}

void set_gemv_variant(int v) {
  variant_slot().store(v == 1 ? 1 : 2, std::memory_order_relaxed);
}

bool gemv_fp8_row() {
  return row_slot(RowKind::Fp8).load(std::memory_order_relaxed);
}

void set_gemv_fp8_row(bool on) {
  row_slot(RowKind::Fp8).store(on, std::memory_order_relaxed);
}

bool gemv_bf16_row() {
  return row_slot(RowKind::Bf16).load(std::memory_order_relaxed);
}

void set_gemv_bf16_row(bool on) {
  row_slot(RowKind::Bf16).store(on, std::memory_order_relaxed);
}

bool gemv_x_once() {
  return x_once_slot().load(std::memory_order_relaxed);
}

void set_gemv_x_once(bool on) {
  x_once_slot().store(on, std::memory_order_relaxed);
}

void set_gemv_launch_override(int rows_per_warp, int split_k) {
  // Only the two instantiated row counts; ks must divide the block's warps.
  const bool rows_ok = rows_per_warp == 0 || rows_per_warp == 1 || rows_per_warp == 4;
  const bool ks_ok = split_k == 0 || (split_k > 0 && split_k <= kSplitWarps && kSplitWarps % split_k == 0);
  if (!rows_ok || !ks_ok) {
    const std::string what =
        "set_gemv_launch_override(" + std::to_string(rows_per_warp) + ", " + std::to_string(split_k) + ")";
    BLOOMERY_CUDA_CHECK(
        cudaErrorInvalidValue,
        what + ": needs rows per warp 0, 1 or 4 and split-K 0, 1, 2, 4 or 8 (0: the heuristic's)");
  }
  launch_override_slot().store(rows_per_warp | split_k << 8, std::memory_order_relaxed);
}

// True when rows can be read in 16-byte units: K a multiple of the unit (row starts stay aligned) and, for
// FP8 blocks, tiles whose width is a multiple of 16 (one scale per unit).
bool unit_path(const DeviceWeight& w) {
  const Width W = width_of(w.format);
  const uint64_t E = W == Width::F32 ? 4 : (W == Width::Half ? 8 : 16);
  if (w.cols % E != 0) return false;
  if (w.format == FormatId::FP8_BLOCK && w.block_k % 16 != 0) return false;
  return true;
}

bool gemv_group_applies(std::span<const GemvProduct> ps, const float* x, int T) {
  if (T < 1 || T > kGemvMaxRows || gemv_variant() != 2 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return false;
  for (const GemvProduct& p : ps)
    if (!unit_path(p.w) || p.w.rows == 0) return false;
  return true;
}

void gemv_group(std::span<const GemvProduct> ps, const float* x, int T, cudaStream_t s) {
  // Each product once to its kernel: BF16 and FP8 on the tensor cores when switched on (gemv_tc.cu), one row
  // of x on the one-row kernel (both kinds in one launch), the rest on the split-K kernel by weight width.
  const bool tc_on = gemv_tc();
  const SplitShape shape = split_shape(T);
  std::vector<GemvProduct> tc, row;
  std::vector<RowKind> kinds;
  std::vector<GemvProduct> by_width[4];  // indexed by Width
  for (const GemvProduct& p : ps) {
    if (RowKind k; takes_row(p.w, x, T, k)) {
      row.push_back(p);
      kinds.push_back(k);
    } else if (tc_on && gemv_tc_fits(p.w, x, T)) {
      tc.push_back(p);
    } else {
      by_width[static_cast<int>(width_of(p.w.format))].push_back(p);
    }
  }
  if (!tc.empty()) gemv_tc_group(tc, x, T, s);
  if (!row.empty()) launch_row_group(row, kinds, x, s, shape.ks);
  // One launch per weight width (the kernel is instantiated per width), in the products' order within it.
  for (Width W : {Width::F32, Width::Half, Width::Fp8, Width::Fp4}) {
    const std::vector<GemvProduct>& same = by_width[static_cast<int>(W)];
    if (same.empty()) continue;
    with_width(W, [&](auto Wc) {
      if (shape.rows_per_warp == 1)
        launch_group<decltype(Wc)::value, 1>(same, x, T, s, shape.ks);
      else
        launch_group<decltype(Wc)::value, 4>(same, x, T, s, shape.ks);
    });
  }
}

void gemv(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y, cudaStream_t s,
          const Epilogue& e) {
  if (n == 0 || T == 0) return;
  if (RowKind kind; takes_row(w, x, T, kind)) {  // one row of BF16 or FP8-family weights
    launch_row(kind, w, row0, n, x, y, s, e, split_shape(T).ks);
    BLOOMERY_CUDA_CHECK_LAUNCH("one-row gemv " + std::string(format_name(w.format)) + " W[" +
                               std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] rows " +
                               std::to_string(row0) + "+" + std::to_string(n) + " x[" + std::to_string(T) +
                               "]");
    return;
  }
  if (gemv_tc() && gemv_variant() == 2 && gemv_tc_fits(w, x, T))  // BF16 and FP8 on the tensor cores
    return gemv_tc_product(w, row0, n, x, T, y, s, e);
  const bool x_aligned = (reinterpret_cast<uintptr_t>(x) % 16) == 0;
  const bool split = unit_path(w) && x_aligned && gemv_variant() == 2;  // the kernel with the epilogue
  if (!unit_path(w) || !x_aligned) {
    const unsigned blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
    pdl_launch(gemv_elements, blocks, kWarps * 32, 0, s, w, row0, n, x, T, y);
  } else if (split) {
    const SplitShape shape = split_shape(T);
    if (shape.rows_per_warp == 1)
      launch_split_width<1>(w, row0, n, x, T, y, s, e, shape.ks);
    else
      launch_split_width<4>(w, row0, n, x, T, y, s, e, shape.ks);
  } else {
    if (T <= 2)
      launch_units<1>(w, row0, n, x, T, y, s);
    else
      launch_units<4>(w, row0, n, x, T, y, s);
  }
  BLOOMERY_CUDA_CHECK_LAUNCH("gemv " + std::string(format_name(w.format)) + " W[" + std::to_string(w.rows) +
                             ", " + std::to_string(w.cols) + "] rows " + std::to_string(row0) + "+" +
                             std::to_string(n) + " x[" + std::to_string(T) + "]");
  if (!split) epilogue(y, n * T, e, s);
}

}  // namespace bloomery::cuda
