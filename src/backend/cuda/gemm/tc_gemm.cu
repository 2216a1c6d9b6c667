// Tensor-core prompt GEMM on stored-format weights, dense and grouped by expert:
// y[t, r] = Σ_k x[t, k] · W[row0 + r, k] with mma.sync m16n8k16 (BF16 in, f32 accumulate).
//
// The activations are first rounded to a BF16 copy (round_x_bf16, stream-ordered scratch, ~1% of the GEMM's
// time at T = 4096). A block then computes a 128 (tokens; 64 for grouped experts, WarpTile) × 128 (weight
// rows) tile in k-steps of 32: each step's BF16 x tile and the weight's raw stored bytes arrive by cp.async
// in a 4-stage ring; every thread converts one half-row of the weight into a double-buffered BF16 tile in
// shared memory (the weight is never dequantised to global memory) in the same phase as the 8 warps
// (WarpTile) run ldmatrix + mma on the previous step, so there is one barrier per step. BF16 weights skip the
// conversion: ldmatrix reads the raw stage.
//
// Split mode (the default, gemm_internal.h GemmMode): x enters as hi + lo, two BF16 terms (~16 significant
// bits) and every fragment is multiplied twice. Plain BF16 activations (relative 2^-8) pass the calibrated
// accuracy gate (docs/accuracy.md, "The CUDA gate") and keep the trained models' perplexity within 0.03 % of
// the f32 CPU engine's, but they move states between runs chunked differently by more than the card's
// speculative-decoding tests allow (docs/performance.md, "Plain BF16 prompt activations"). Measured at
// T = 4096: plain BF16 152–208 TFLOP/s on the large shapes, split 84–134 (gemm_tc_test ThroughputT4096).
//
// Exact scale handling: an E2M1 element times its E4M3 (NVFP4) or E8M0 (MXFP4) block scale, and an E4M3
// element times its E8M0 (MXFP8) scale, is exact in BF16, so the tiles hold the scaled elements exactly and
// the f32 global (NVFP4 weight_scale_2, FP8 per-tensor) or the FP8 per-channel scale multiply the f32
// accumulator in the epilogue. FP8 128×128 block scales multiply the element in f32 and round once to BF16
// (relative ≤ 2^-8, the same as the activations' rounding). F16/F32 weights are rounded to BF16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elements.cuh"
#include "backend/cuda/gemm/gemm_internal.h"
#include "backend/cuda/misc/mma.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/misc/shared_memory.h"

namespace bloomery::cuda {
namespace {

constexpr int kBN = 128, kBK = 32, kThreads = 256, kStages = 4;
constexpr int kTileStride = kBK + 8;  // bf16 per A/B tile row: 80 B (ldmatrix conflict-free)

// The weight's element storage, one kernel instantiation each.
enum class Kind : int { Bf16, F16, F32, Fp8, Fp4 };

template <Kind KD>
struct Raw {
  static constexpr int kRowBytes = KD == Kind::F32   ? 4 * kBK
                                   : KD == Kind::Fp8 ? kBK
                                   : KD == Kind::Fp4 ? kBK / 2
                                                     : 2 * kBK;
  static constexpr int kStride = kRowBytes + 16;  // BF16: 80 B, the tile stride (ldmatrix reads it as is)
  static constexpr int kChunks = kRowBytes / 16;
  static constexpr int kStageBytes = kBN * kStride;
};

// How the 8 warps share a block's tile of kBM token rows × 128 weight rows.
//  - Wide (dense products): 128 rows, 2 × 4 warps of 64 × 32; two B and four A fragment loads per 16 MMAs.
//  - Tall (grouped experts): 64 rows, 1 × 8 warps of 64 × 16, and a warp skips the 16-row fragments past the
//    tile's last row, so an expert with few rows costs MMAs for its rows only (rounded up to 16); in the wide
//    layout rows past the end are multiplied as zeros. The 64-row tiles also halve the activation stages, so
//    that two blocks fit an SM in split mode (the 128-row tiles' split stages take 120 KB: one block per SM).
//    Measured at 512 NVFP4 experts (GemmTc.GroupedRoutedThroughput): 2.3× faster than wide at 10 rows per
//    expert, 1.7× at 40, within 4 % at 80 under uniform routing.
enum class TileLayout : int { Wide, Tall };

template <TileLayout L>
struct WarpTile {
  static constexpr int kBM = L == TileLayout::Tall ? 64 : 128;              // token rows per block
  static constexpr int kWM = L == TileLayout::Wide ? 2 : 1, kWN = 8 / kWM;  // warps along rows, columns
  static constexpr int kMI = kBM / 16 / kWM;                                // 16-row A fragments per warp
  static constexpr int kNI = kBN / 8 / kWN;                                 // 8-column B fragments per warp
  static constexpr int kATileBytes = kBM * kTileStride * 2;
};

constexpr int kBTileBytes = kBN * kTileStride * 2;

template <Kind KD, TileLayout L>
constexpr int smem_bytes(bool split) {
  return kStages * ((split ? 2 : 1) * WarpTile<L>::kATileBytes + Raw<KD>::kStageBytes) +
         (KD == Kind::Bf16 ? 0 : 2 * kBTileBytes) + 256 * 4;
}

struct TcArgs {
  DeviceWeight w;            // dense: the weight; grouped: format and cols only
  const DeviceWeight* ws;    // grouped: one per expert (device); null for dense
  const int32_t* offsets;    // grouped: [E + 1] row offsets (device)
  int64_t E, row0, n, T;     // T: dense rows of x, grouped max_rows
  const __nv_bfloat16* x;    // the activations rounded to BF16 (round_x_bf16), row-major [rows, K]
  const __nv_bfloat16* xlo;  // split mode: BF16(x − x_hi), the same layout; null for plain BF16
  float* y;
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ bool fp4_format(FormatId f) {
  return f == FormatId::NVFP4 || f == FormatId::W4A16_NVFP4 || f == FormatId::NVFP4_CT ||
         f == FormatId::MXFP4;
}

// Raw bits of the scale that serves elements [k, k + 16) of row `row` in the tile conversion (decoded at use,
// so the load's latency hides behind a k-step). Formats whose scale goes to the epilogue return 0.
template <Kind KD>
__device__ __forceinline__ uint32_t load_scale(const DeviceWeight& w, uint64_t row, uint64_t k) {
  if constexpr (KD == Kind::Fp4) {
    if (w.format == FormatId::MXFP4) return __ldg(w.block_scales + row * (w.cols / 32) + k / 32);
    return __ldg(w.block_scales + row * (w.cols / 16) + k / 16);
  } else if constexpr (KD == Kind::Fp8) {
    if (w.format == FormatId::MXFP8) return __ldg(w.block_scales + row * (w.cols / 32) + k / 32);
    if (w.format == FormatId::FP8_BLOCK) {
      const uint64_t kb = (w.cols + w.block_k - 1) / w.block_k;
      return __float_as_uint(__ldg(w.scale_f32 + (row / w.block_n) * kb + k / w.block_k));
    }
    return 0;
  } else {
    return 0;
  }
}

// Converts 16 weight elements (raw bytes at `src`) of row `row`, starting at column k, to 8 BF16 pairs.
template <Kind KD>
__device__ __forceinline__ void convert_w(const DeviceWeight& w, const uint8_t* src, uint32_t sc,
                                          uint64_t row, uint64_t k, const uint32_t* lut, uint32_t (&o)[8]) {
  if constexpr (KD == Kind::F32) {
    const float4* p = reinterpret_cast<const float4*>(src);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 q = p[i];
      o[2 * i] = pack_bf16(q.x, q.y), o[2 * i + 1] = pack_bf16(q.z, q.w);
    }
  } else if constexpr (KD == Kind::F16) {
    const uint4* p = reinterpret_cast<const uint4*>(src);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint4 q = p[i];
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
        o[4 * i + j] = pack_bf16(f.x, f.y);
      }
    }
  } else if constexpr (KD == Kind::Fp8) {
    const uint4 q = *reinterpret_cast<const uint4*>(src);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    float s = 1.0f;
    if (w.format == FormatId::MXFP8) s = e8m0_to_f32(sc);
    if (w.format == FormatId::FP8_BLOCK) s = __uint_as_float(sc);
    // FP8 block tiles narrower than 16 or not aligned to 16: look the scale up per element (slow, rare).
    const bool per_element = w.format == FormatId::FP8_BLOCK && (w.block_k % 16) != 0;
    const uint64_t kb = per_element ? (w.cols + w.block_k - 1) / w.block_k : 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint16_t pair = static_cast<uint16_t>(words[j / 2] >> (16 * (j % 2)));
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      if (per_element) {
        f.x = __fmul_rn(f.x, __ldg(w.scale_f32 + (row / w.block_n) * kb + (k + 2 * j) / w.block_k));
        f.y = __fmul_rn(f.y, __ldg(w.scale_f32 + (row / w.block_n) * kb + (k + 2 * j + 1) / w.block_k));
      } else {
        f.x = __fmul_rn(f.x, s), f.y = __fmul_rn(f.y, s);
      }
      o[j] = pack_bf16(f.x, f.y);
    }
  } else if constexpr (KD == Kind::Fp4) {
    const uint2 q = *reinterpret_cast<const uint2*>(src);
    const float s = w.format == FormatId::MXFP4 ? e8m0_to_f32(sc) : e4m3_to_f32(sc);
    const __nv_bfloat162 s2 = __float2bfloat162_rn(s);  // exact: E4M3 and E8M0 values are BF16 values
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t byte = ((j < 4 ? q.x : q.y) >> (8 * (j % 4))) & 0xFFu;
      const uint32_t e = lut[byte];  // both nibbles as a BF16 pair (low nibble = lower k)
      const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&e), s2);  // exact
      o[j] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
}

// Finds this block's (expert, m-tile) in the grouped launch: blockIdx.x counts the m-tiles of all experts in
// order. Returns false for blocks past the last tile.
__device__ __forceinline__ bool find_group_tile(const int32_t* offsets, int64_t E, int bm, int64_t& e_out,
                                                int64_t& tile_out) {
  __shared__ int64_t s_e, s_tile;
  __shared__ int64_t warp_sum[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t target = blockIdx.x;
  if (threadIdx.x == 0) s_e = -1;
  int64_t base = 0;
  for (int64_t c0 = 0; c0 < E; c0 += kThreads) {
    const int64_t e = c0 + threadIdx.x;
    int64_t tiles = 0;
    if (e < E) {
      const int64_t cnt = static_cast<int64_t>(offsets[e + 1]) - offsets[e];
      tiles = cnt > 0 ? (cnt + bm - 1) / bm : 0;
    }
    int64_t v = tiles;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t u = __shfl_up_sync(0xFFFFFFFFu, v, o);
      if (lane >= o) v += u;
    }
    if (lane == 31) warp_sum[warp] = v;
    __syncthreads();
    int64_t before = 0, total = 0;
#pragma unroll
    for (int i = 0; i < kThreads / 32; ++i) {
      if (i < warp) before += warp_sum[i];
      total += warp_sum[i];
    }
    const int64_t incl = base + before + v, excl = incl - tiles;
    if (target >= excl && target < incl) s_e = e, s_tile = target - excl;
    base += total;
    __syncthreads();
    if (s_e >= 0 || base > target) break;
  }
  const int64_t e = s_e;
  e_out = e, tile_out = s_tile;
  return e >= 0;
}

// Two blocks per SM, except F32 weights whose stages fill the shared memory of one.
template <Kind KD, TileLayout L>
__global__ void __launch_bounds__(kThreads, KD == Kind::F32 ? 1 : 2) tc_gemm_kernel(TcArgs a) {
  using WT = WarpTile<L>;
  constexpr int kBM = WT::kBM;
  constexpr bool kTall = L != TileLayout::Wide;
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ __align__(16) uint8_t smem[];
  __nv_bfloat16* As = reinterpret_cast<__nv_bfloat16*>(smem);  // [kStages][kBM][kTileStride]
  const bool split = a.xlo != nullptr;
  __nv_bfloat16* Alo = As + kStages * (kBM * kTileStride);  // split mode only: [kStages][kBM][kTileStride]
  uint8_t* wraw = smem + (split ? 2 : 1) * kStages * WT::kATileBytes;  // [kStages][kBN][Raw::kStride]
  __nv_bfloat16* Bt =
      reinterpret_cast<__nv_bfloat16*>(wraw + kStages * Raw<KD>::kStageBytes);  // [2][kBN][..]
  uint32_t* lut = reinterpret_cast<uint32_t*>(Bt + 2 * kBN * kTileStride);

  DeviceWeight w = a.w;
  int64_t T = a.T, begin = 0, tile_m = blockIdx.x;
  if (a.offsets) {
    int64_t e = 0;
    if (!find_group_tile(a.offsets, a.E, kBM, e, tile_m)) return;
    w = a.ws[e];
    begin = a.offsets[e];
    // Rows past max_rows (a.T) are not in the BF16 copy: a caller breaking offsets[E] ≤ max_rows gets those
    // rows left unwritten, never an out-of-bounds read.
    T = min(a.offsets[e + 1] - begin, a.T - begin);
  }
  const int64_t K = static_cast<int64_t>(w.cols), n = a.n, row0 = a.row0;
  const int64_t m0 = tile_m * kBM, n0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const __nv_bfloat16* x = a.x + begin * K;  // offset by kbase below
  const __nv_bfloat16* xlo = split ? a.xlo + begin * K : nullptr;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if constexpr (KD == Kind::Fp4) {
    // E2M1 byte → BF16 pair: magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 (exact), sign in bit 3.
    const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(e2m1_to_f32(tid & 0xF)));
    const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(e2m1_to_f32(tid >> 4)));
    lut[tid] = lo | (hi << 16);
  }

  const int64_t row_bytes = K * (KD == Kind::F32 ? 4 : KD == Kind::Fp8 ? 1 : 2) / (KD == Kind::Fp4 ? 4 : 1);
  // Split K (blockIdx.z of gridDim.z): this block's k-steps are [kt0, kt0 + nk); base pointers and scale
  // columns are offset by kbase, the stage/tile ring counts from 0.
  const int nk_all = static_cast<int>(K / kBK), per = (nk_all + gridDim.z - 1) / gridDim.z;
  const int kt0 = static_cast<int>(blockIdx.z) * per, nk = min(per, nk_all - kt0);
  const uint64_t kbase = static_cast<uint64_t>(kt0) * kBK;
  const uint8_t* wdata = static_cast<const uint8_t*>(w.data) + static_cast<int64_t>(kt0) * Raw<KD>::kRowBytes;
  x += kbase;
  if (split) xlo += kbase;

  // One commit group per k-step: the BF16 x tile and the weight's raw bytes.
  auto load_stage = [&](int kt) {
    if (kt < nk) {
      const int st = kt % kStages;
      __nv_bfloat16* xs = As + st * (kBM * kTileStride);
#pragma unroll
      for (int i = 0; i < (kBM * kBK / 8) / kThreads; ++i) {
        const int c = tid + i * kThreads, r = c >> 2, cc = c & 3;
        const bool ok = m0 + r < T;
        cp_async16(xs + r * kTileStride + cc * 8, x + (ok ? m0 + r : 0) * K + kt * kBK + cc * 8, ok);
        if (split)
          cp_async16(Alo + st * (kBM * kTileStride) + r * kTileStride + cc * 8,
                     xlo + (ok ? m0 + r : 0) * K + kt * kBK + cc * 8, ok);
      }
      uint8_t* wsm = wraw + st * Raw<KD>::kStageBytes;
      constexpr int kW = kBN * Raw<KD>::kChunks;
#pragma unroll
      for (int i = 0; i < (kW + kThreads - 1) / kThreads; ++i) {
        const int c = tid + i * kThreads;
        if (kW % kThreads == 0 || c < kW) {
          const int r = c / Raw<KD>::kChunks, cc = c % Raw<KD>::kChunks;
          const bool ok = n0 + r < n;
          cp_async16(wsm + r * Raw<KD>::kStride + cc * 16,
                     wdata + (row0 + (ok ? n0 + r : 0)) * row_bytes + kt * Raw<KD>::kRowBytes + cc * 16, ok);
        }
      }
    }
    cp_async_commit();
  };

  // This thread's half-row in the weight conversion: row cr, elements [ch·16, ch·16 + 16) of the k-step.
  const int cr = tid >> 1, ch = tid & 1;
  const bool c_ok = n0 + cr < n;
  const uint64_t c_row = static_cast<uint64_t>(row0 + (c_ok ? n0 + cr : 0));
  auto convert_stage = [&](int kt, uint32_t sc) {
    constexpr int kElemBytesX2 = KD == Kind::F32 ? 8 : KD == Kind::F16 ? 4 : KD == Kind::Fp8 ? 2 : 1;
    const uint8_t* src =
        wraw + (kt % kStages) * Raw<KD>::kStageBytes + cr * Raw<KD>::kStride + ch * 16 * kElemBytesX2 / 2;
    uint32_t o[8];
    convert_w<KD>(w, src, sc, c_row, kbase + static_cast<uint64_t>(kt) * kBK + ch * 16, lut, o);
    uint4* d = reinterpret_cast<uint4*>(Bt + (kt & 1) * (kBN * kTileStride) + cr * kTileStride + ch * 16);
    d[0] = make_uint4(o[0], o[1], o[2], o[3]);
    d[1] = make_uint4(o[4], o[5], o[6], o[7]);
  };
  constexpr bool kConvert = KD != Kind::Bf16;
  constexpr bool kScaled = KD == Kind::Fp4 || KD == Kind::Fp8;

  // Pipeline: stages of k-steps kt+1..kt+3 are in flight while step kt multiplies; the weight of step kt+1
  // is converted (into the other BF16 tile) in the same phase as step kt's mma, so one barrier per step.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load_stage(s);
  uint32_t sc_next = 0;
  if constexpr (kConvert) {
    const uint32_t sc0 = kScaled ? load_scale<KD>(w, c_row, kbase + ch * 16) : 0;
    if (kScaled && nk > 1) sc_next = load_scale<KD>(w, c_row, kbase + kBK + ch * 16);
    cp_async_wait<kStages - 2>();
    __syncthreads();
    convert_stage(0, sc0);
  }

  constexpr int kMI = WT::kMI, kNI = WT::kNI;
  float acc[kMI][kNI][4] = {};
  const int wm = warp % WT::kWM, wn = warp / WT::kWM;
  // Tall: the warp's A fragments that hold a row of this tile (a warp-uniform count, at least 1 for a live
  // tile); wide: all of them.
  const int mi_live = kTall ? static_cast<int>(min(static_cast<int64_t>(kMI), (T - m0 + 15) / 16)) : kMI;

  for (int kt = 0; kt < nk; ++kt) {
    // Steps ≤ kt+1 landed (kt+1 is converted below); B tile kt visible; step kt-1's readers are done.
    cp_async_wait<kStages - 3>();
    __syncthreads();
    load_stage(kt + kStages - 1);  // into the stage step kt-1 used
    if constexpr (kConvert) {
      const uint32_t sc = sc_next;
      if (kScaled && kt + 2 < nk)
        sc_next = load_scale<KD>(w, c_row, kbase + static_cast<uint64_t>(kt + 2) * kBK + ch * 16);
      if (kt + 1 < nk) convert_stage(kt + 1, sc);
    }
    const __nv_bfloat16* Asrc = As + (kt % kStages) * (kBM * kTileStride);
    const __nv_bfloat16* Bsrc =
        kConvert ? Bt + (kt & 1) * (kBN * kTileStride)
                 : reinterpret_cast<const __nv_bfloat16*>(wraw + (kt % kStages) * Raw<KD>::kStageBytes);
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      // B fragments for the warp's columns first, then one A fragment at a time (fewer live registers).
      uint32_t bf[kNI / 2][4];
#pragma unroll
      for (int nj = 0; nj < kNI / 2; ++nj)
        ldmatrix_x4(bf[nj], Bsrc + (wn * kNI * 8 + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * kTileStride +
                                ks * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
        if (mi >= mi_live) break;
        const int arow = wm * kMI * 16 + mi * 16 + (lane & 15);
        uint32_t af[4];
        ldmatrix_x4(af, Asrc + arow * kTileStride + ks * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni)
          mma_bf16(acc[mi][ni], af, bf[ni / 2][(ni % 2) * 2], bf[ni / 2][(ni % 2) * 2 + 1]);
        if (split) {  // the activations' low halves: x ≈ hi + lo to ~16 bits
          ldmatrix_x4(af,
                      Asrc + kStages * (kBM * kTileStride) + arow * kTileStride + ks * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int ni = 0; ni < kNI; ++ni)
            mma_bf16(acc[mi][ni], af, bf[ni / 2][(ni % 2) * 2], bf[ni / 2][(ni % 2) * 2 + 1]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: the scales that stayed out of the tiles, then f32 stores.
  const bool global = fp4_format(w.format) ? w.format != FormatId::MXFP4 : w.format == FormatId::FP8_TENSOR;
  const bool channel = w.format == FormatId::FP8_CHANNEL;
  const bool pairs = (n % 2) == 0;
  // Split K: each split writes its own f32 partial [T, n]; reduce_splits sums them in a fixed order.
  float* y = (gridDim.z > 1 ? a.y + static_cast<int64_t>(blockIdx.z) * a.T * n : a.y) + begin * n;
  const int g = lane >> 2, c2 = (lane & 3) * 2;
#pragma unroll
  for (int ni = 0; ni < kNI; ++ni) {
    const int64_t r = n0 + wn * kNI * 8 + ni * 8 + c2;
    if (r >= n) continue;
    const bool two = r + 1 < n;
    float s0 = global ? w.global : 1.0f, s1 = s0;
    if (channel) {
      s0 = w.scale_f32[row0 + r];
      s1 = two ? w.scale_f32[row0 + r + 1] : 0.0f;
    }
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int64_t t = m0 + wm * kMI * 16 + mi * 16 + g + hh * 8;
        if (t >= T) continue;
        const float v0 = acc[mi][ni][2 * hh] * s0, v1 = acc[mi][ni][2 * hh + 1] * s1;
        float* out = y + t * n + r;
        if (pairs) {
          *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
        } else {
          out[0] = v0;
          if (two) out[1] = v1;
        }
      }
  }
}

// xb = BF16(x) for the first rows of x (grouped: offsets[E] rows, read on the card), 8 elements per step.
__global__ void round_x_bf16(const float* __restrict__ x, __nv_bfloat16* __restrict__ xb,
                             __nv_bfloat16* __restrict__ xlo, int64_t rows, int64_t K,
                             const int32_t* __restrict__ rows_used) {
  pdl_wait();
  pdl_launch_dependents();
  if (rows_used) rows = min(rows, static_cast<int64_t>(*rows_used));
  const int64_t units = rows * K / 8;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < units;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 p = __ldg(reinterpret_cast<const float4*>(x) + 2 * i);
    const float4 q = __ldg(reinterpret_cast<const float4*>(x) + 2 * i + 1);
    const uint4 hi =
        make_uint4(pack_bf16(p.x, p.y), pack_bf16(p.z, p.w), pack_bf16(q.x, q.y), pack_bf16(q.z, q.w));
    reinterpret_cast<uint4*>(xb)[i] = hi;
    if (xlo) {  // the residuals x − hi are exact in f32; rounded once more to BF16
      auto lo2 = [](uint32_t h, float a, float b) {
        return pack_bf16(a - __uint_as_float(h << 16), b - __uint_as_float(h & 0xFFFF0000u));
      };
      reinterpret_cast<uint4*>(xlo)[i] =
          make_uint4(lo2(hi.x, p.x, p.y), lo2(hi.y, p.z, p.w), lo2(hi.z, q.x, q.y), lo2(hi.w, q.z, q.w));
    }
  }
}

// Stream-ordered BF16 copy of x (rows × K) for one GEMM: allocated and freed on `s`, so concurrent streams
// and backends never share it.
// Split mode: the low halves follow the high ones in the same allocation (xb + rows·K).
__nv_bfloat16* rounded_x(const float* x, int64_t rows, int64_t K, const int32_t* rows_used, bool split,
                         cudaStream_t s) {
  void* p = nullptr;
  BLOOMERY_CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(rows * K) * (split ? 4 : 2), s),
                      "tc_gemm: BF16 activations [" + std::to_string(rows) + ", " + std::to_string(K) + "]");
  auto* xb = static_cast<__nv_bfloat16*>(p);
  const int64_t units = rows * K / 8;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((units + 255) / 256, 132 * 16));
  pdl_launch(round_x_bf16, blocks, 256, 0, s, x, xb, split ? xb + rows * K : nullptr, rows, K, rows_used);
  BLOOMERY_CUDA_CHECK_LAUNCH("tc_gemm: round x to BF16 [" + std::to_string(rows) + ", " + std::to_string(K) +
                             "]");
  return xb;
}

Kind kind_of(FormatId f) {
  switch (f) {
    case FormatId::BF16:
      return Kind::Bf16;
    case FormatId::F16:
      return Kind::F16;
    case FormatId::F32:
      return Kind::F32;
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
    case FormatId::MXFP4:
      return Kind::Fp4;
    default:
      return Kind::Fp8;
  }
}

template <Kind KD, TileLayout L>
void launch(const TcArgs& a, unsigned m_tiles, unsigned splits, cudaStream_t s) {
  // Above 48 KB of dynamic shared memory needs the opt-in, for the larger (split) layout.
  opt_in_shared_memory(reinterpret_cast<const void*>(tc_gemm_kernel<KD, L>), smem_bytes<KD, L>(true),
                       "tc_gemm");
  const int bytes = smem_bytes<KD, L>(a.xlo != nullptr);
  const dim3 grid(m_tiles, static_cast<unsigned>((a.n + kBN - 1) / kBN), splits);
  pdl_launch(tc_gemm_kernel<KD, L>, grid, kThreads, bytes, s, a);
}

// The grouped layouts are instantiated for the expert formats that ship (BF16, the FP8 kinds, the FP4 kinds);
// F16 and F32 experts take the wide one (m_tiles counted for its 128-row tiles by the caller).
template <TileLayout L>
void launch_layout(const TcArgs& a, unsigned m_tiles, unsigned splits, cudaStream_t s) {
  switch (kind_of(a.w.format)) {
    case Kind::Bf16:
      return launch<Kind::Bf16, L>(a, m_tiles, splits, s);
    case Kind::Fp8:
      return launch<Kind::Fp8, L>(a, m_tiles, splits, s);
    case Kind::Fp4:
      return launch<Kind::Fp4, L>(a, m_tiles, splits, s);
    case Kind::F16:
      return launch<Kind::F16, TileLayout::Wide>(a, m_tiles, splits, s);
    case Kind::F32:
      return launch<Kind::F32, TileLayout::Wide>(a, m_tiles, splits, s);
  }
}

// y = Σ_z partial[z] over the splits, in order (deterministic, unlike atomics).
__global__ void reduce_splits(const float* __restrict__ partial, float* __restrict__ y, int64_t count,
                              int splits) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = partial[i];
    for (int z = 1; z < splits; ++z) v += partial[z * count + i];
    y[i] = v;
  }
}

int sm_count() {
  static const int count = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return n;
  }();
  return count;
}

}  // namespace

void* round_activations_bf16(const float* x, int64_t rows, int64_t K, bool split, cudaStream_t s) {
  return rounded_x(x, rows, K, nullptr, split, s);
}

bool tc_gemm_supported(int64_t K, const void* weight_data, const float* x) {
  return K > 0 && K % kBK == 0 && reinterpret_cast<uintptr_t>(weight_data) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void tc_gemm(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int64_t T, float* y, bool split,
             cudaStream_t s) {
  if (n == 0 || T == 0) return;
  __nv_bfloat16* xb = rounded_x(x, T, static_cast<int64_t>(w.cols), nullptr, split, s);
  // Few output tiles (small T or n) leave SMs idle and each block walks all of K: split K so that about two
  // blocks per SM run, at least 8 k-steps each, into f32 partials that one pass sums (deterministic).
  constexpr int kBM = WarpTile<TileLayout::Wide>::kBM;
  const int64_t m_tiles = (T + kBM - 1) / kBM, tiles = m_tiles * ((n + kBN - 1) / kBN), nk = w.cols / kBK;
  int64_t splits = std::min<int64_t>({(2 * sm_count() + tiles - 1) / tiles, nk / 8, 16});
  float* partial = nullptr;
  if (splits > 1) {
    const int64_t per = (nk + splits - 1) / splits;
    splits = (nk + per - 1) / per;  // no empty split
    BLOOMERY_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), splits * T * n * 4, s),
                        "tc_gemm: split-K partials");
  } else {
    splits = 1;
  }
  TcArgs a{w,
           nullptr,
           nullptr,
           1,
           row0,
           n,
           T,
           xb,
           split ? xb + T * static_cast<int64_t>(w.cols) : nullptr,
           partial ? partial : y};
  launch_layout<TileLayout::Wide>(a, static_cast<unsigned>(m_tiles), static_cast<unsigned>(splits), s);
  if (partial) {
    BLOOMERY_CUDA_CHECK_LAUNCH("tc_gemm (split K " + std::to_string(splits) + ")");
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((T * n + 255) / 256, 132 * 16));
    pdl_launch(reduce_splits, blocks, 256, 0, s, partial, y, T * n, static_cast<int>(splits));
    BLOOMERY_CUDA_CHECK_LAUNCH("tc_gemm: reduce " + std::to_string(splits) + " splits");
    BLOOMERY_CUDA_CHECK(cudaFreeAsync(partial, s), "tc_gemm: free split-K partials");
  }
  BLOOMERY_CUDA_CHECK_LAUNCH("tc_gemm " + std::string(format_name(w.format)) + " W[" +
                             std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] rows " +
                             std::to_string(row0) + "+" + std::to_string(n) + " x[" + std::to_string(T) +
                             "]");
  BLOOMERY_CUDA_CHECK(cudaFreeAsync(xb, s), "tc_gemm: free BF16 activations");
}

void tc_grouped_gemm(const DeviceWeight* weights, int64_t E, const int32_t* offsets, int64_t max_rows,
                     int64_t n, int64_t K, FormatId format, const float* xs, float* ys, bool split,
                     GroupedTile tile, cudaStream_t s) {
  if (n == 0 || max_rows == 0 || E == 0) return;
  DeviceWeight shape;
  shape.format = format;
  shape.cols = static_cast<uint64_t>(K);
  __nv_bfloat16* xb = rounded_x(xs, max_rows, K, offsets + E, split, s);
  TcArgs a{shape, weights, offsets, E, 0, n, max_rows, xb, split ? xb + max_rows * K : nullptr, ys};
  // Σ_e ceil(count_e / bm) ≤ max_rows / bm + E: enough blocks for any split of the rows (F16 and F32
  // experts always run the wide 128-row tiles).
  const Kind kd = kind_of(format);
  const bool tall = tile == GroupedTile::Tall && kd != Kind::F16 && kd != Kind::F32;
  const int bm = tall ? WarpTile<TileLayout::Tall>::kBM : WarpTile<TileLayout::Wide>::kBM;
  const auto blocks = static_cast<unsigned>((max_rows + bm - 1) / bm + E);
  if (tall)
    launch_layout<TileLayout::Tall>(a, blocks, 1, s);
  else
    launch_layout<TileLayout::Wide>(a, blocks, 1, s);
  BLOOMERY_CUDA_CHECK_LAUNCH("tc_grouped_gemm " + std::string(format_name(format)) +
                             " E=" + std::to_string(E) + " W[" + std::to_string(n) + ", " +
                             std::to_string(K) + "] rows<=" + std::to_string(max_rows));
  BLOOMERY_CUDA_CHECK(cudaFreeAsync(xb, s), "tc_grouped_gemm: free BF16 activations");
}

}  // namespace bloomery::cuda
