// Decode GEMV on the tensor cores for BF16-stored weights: y[t, r] = e(Σ_k x[t, k] · W[row0 + r, k]) for
// 1 ≤ T ≤ 8 rows of x, the same product, epilogue and grouped form as the split-K kernel (gemv.cu, variant
// 2), chosen by gemv_tc() (on; BLOOMERY_CUDA_GEMV_TC=0 and bench --ab gemv-tc for the split-K kernel). Why:
// the split-K kernel spends ~5 warp instructions per weight element (unpack, convert, T FMAs) and its T = 8
// form holds 214 registers (12 % occupancy, docs/performance.md); here a warp feeds 16 weight rows straight
// from its 16-byte loads to mma.sync m16n8k16 (bf16 in, f32 accumulate) against x staged once per block in
// shared memory, so a weight element costs a fraction of an instruction at any T, and the kernel holds few
// registers.
//
// Exactness. A is the stored bf16 weight, unrounded. Each activation is split as hi = bf16(x) and
// lo = bf16(x − hi) (x − hi is exact in f32): |x − hi − lo| ≤ 2^-8 |x − hi| ≤ 2^-16 |x|, so the activation
// keeps ~16 of its 24 significand bits and y differs from the exact Σ x·w by at most 2^-16 · Σ_k |x_k w_k|
// plus the f32 accumulation's rounding (the tensor core's within an MMA, then one f32 add per worker in a
// fixed order; of the size of any f32 summation order, ~2^-24 per add). Non-finite activations: an inf x
// gives lo = inf − inf = NaN, so the row comes out NaN where the f32 kernels give ±inf (or NaN).
// Results repeat bit for bit: the MMA's order is fixed in hardware, and a tile's partial sums are added in
// worker order, which depends only on the product's split count S (below), not on the launch (alone or
// grouped).
//
// FP8-family weights (MXFP8, FP8 per-tensor / per-channel / block with tiles a multiple of 32 wide) take the
// same kernel: a lane loads 8 stored bytes of a row per chunk instead of 16 (the lane group still reads a
// full 32-byte sector), and each E4M3 pair becomes a bf16 pair exactly (cvt to f16x2, then bf16: every E4M3
// value has at most 4 significant bits). A chunk (32 k) lies inside one scale block of every FP8 format, so
// the chunk's two k-steps go into a zeroed accumulator that is then added to the sum times the row's scale
// for that chunk (an MX block is exactly a chunk): the weight stays unrounded, the scale is applied to each
// 32-element partial sum as the split-K kernel applies it to each 16-element one. Why: the split-K kernel
// reads an MXFP8 row at about a quarter of the copy rate, bound by reloading 64 bytes of f32 x per 16 weight
// bytes through L1 (docs/performance.md); here x comes once per block from shared memory. Like BF16, FP8
// takes this kernel from two rows of x (gemv_tc.h).
//
// Layout. A warp owns a tile of 16 weight rows; lane (g = lane / 4, t = lane % 4) reads rows g and g + 8. A
// "chunk" is 32 k: lane t loads elements [8t, 8t + 8) of it with one 16-byte load per row, so a lane group
// reads 64 consecutive bytes (two full sectors) of each row. mma m16n8k16 wants, per k-step, A words (row g,
// k 2t.. 2t+1) and (row g, k 2t+8..2t+9); the dot product does not care which physical k a logical k is as
// long as A and B agree, so step s (0, 1) of a chunk takes the loaded words 2s and 2s + 1 as those two:
// physical k (2t, 2t+1, 2t+8, 2t+9) ↔ logical (8t + 4s .. 8t + 4s + 3). B's lane (g, t) holds the same k of
// column g, i.e. words 2s, 2s + 1 of the 8 staged values [8t, 8t + 8) of its column: the staged row stays in
// natural k order (each 8-value piece as 16 bytes of hi, then 16 of lo) and one 16-byte shared load feeds
// both steps.
// B's columns: T ≤ 4: column j = hi of x row j, column 4 + j = its lo, so one MMA gives both halves (the 8
// columns would otherwise be half empty; it halves the MMAs and B loads); T ≥ 5: two MMAs per k-step, hi
// then lo, into the same accumulator. Columns past T read x row 0's (their results are dropped).
//
// Work split. Block = 8 warps = RT tiles × KS warps along K; clusters of CK blocks split K further, so a tile
// has S = KS · CK workers (S ≤ 64, a power of two, from plan_for: enough warps for the card, ≥ 2 chunks a
// worker). Worker w takes chunks w, w + S, w + 2S, … (interleaved: the S workers of a tile read neighbouring
// 64-byte runs of each row at the same time). A block stages only its workers' chunks of the T rows of x, in
// windows of at most 48 KB (hi and lo: 4 bytes an element; K = 10240 at T = 8 would need 320 KB), with the
// first batch of weight loads of every window in flight during its staging. Partials go to shared memory; the
// tile's sum runs over workers 0..S−1 in order, the other blocks of a cluster read through distributed shared
// memory.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elements.cuh"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/gemv/fp8_row_scale.cuh"
#include "backend/cuda/gemv/gemv_store.cuh"
#include "backend/cuda/gemv/gemv_tc.h"
#include "backend/cuda/misc/mma.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/misc/shared_memory.h"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kTileRows = 16;
constexpr int kChunk = 32;  // k elements of one lane group's load per row (4 lanes × 8 elements)
static_assert(kChunk == kFp8ScaleChunk, "RowScale gives one scale a chunk");
constexpr int kMaxSplits = 64;  // workers per tile: 8 warps × a cluster of up to 8 blocks (the portable size)
constexpr int kStageBytes = 48 * 1024;  // staged x window per block: 4 blocks of 8 warps fit an SM
constexpr int kGroupMax = 4;

// The stored element widths the kernel reads: BF16, and the FP8 family (E4M3 with a scale per chunk).
enum class TcKind { Bf16, Fp8 };
constexpr bool is_fp8(TcKind k) {
  return k != TcKind::Bf16;
}

// What a lane loads of one row per chunk (8 elements: 16 bytes of BF16, 8 of FP8), and how many chunks a
// batch of loads holds. FP8 keeps a second batch in flight while it converts and multiplies one (its chunks
// take several times the instructions of BF16's, so a warp that waits for each batch after using the last one
// leaves the memory idle); BF16 loads the next batch after using one (measured as kept, docs/performance.md).
template <TcKind KD>
struct TcLoad {
  using Bits = std::conditional_t<is_fp8(KD), uint2, uint4>;
  static constexpr int kElemBytes = is_fp8(KD) ? 1 : 2;
  static constexpr int kBuffers = KD == TcKind::Fp8 ? 2 : 1;
  static constexpr int kAhead = 4;
};

TcKind tc_kind(FormatId f) {
  return f == FormatId::BF16 ? TcKind::Bf16 : TcKind::Fp8;
}

// One product of a launch: its weight, output, epilogue, rows and split, and its first block.
struct TcProduct {
  DeviceWeight w;
  float* y;
  Epilogue e;
  int64_t row0, n;
  int S, KS, KWc;  // workers per tile, warps per tile in a block, chunks per staged window (a multiple of KS)
  unsigned first;
};

struct TcArgs {
  TcProduct p[kGroupMax];
  int count;
  int ck;  // blocks per cluster (all products of one launch)
};

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) {
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Eight activations as bf16 hi and lo = bf16(x − hi), pairs in k order (the lower k in the low half).
__device__ __forceinline__ void split8(float4 a, float4 b, uint4& hi, uint4& lo) {
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  uint32_t h[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 hb = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    const float2 hf = __bfloat1622float2(hb);
    h[i] = bf16x2_bits(hb);
    l[i] = bf16x2_bits(__floats2bfloat162_rn(v[2 * i] - hf.x, v[2 * i + 1] - hf.y));
  }
  hi = make_uint4(h[0], h[1], h[2], h[3]);
  lo = make_uint4(l[0], l[1], l[2], l[3]);
}

// Stages the block's staged positions [P0, P0 + npos) of the T rows of x into xs (uint4 words): row j's
// region starts at j · RS4, staged chunk pos at + 8 · pos, and its 8-element piece t at + 2t as hi then lo
// (the 32 bytes its f32 values arrived in). Staged position q is global chunk (q / KS) · S + base + q % KS,
// base = the block's first worker. The f32 values are copied in with cp.async (every piece in flight at once,
// no registers held across the copy, while the weight batch waits in registers), then split in place. All
// threads; ends synchronised.
__device__ __forceinline__ void stage_window(const float* __restrict__ x, int T, int K, int S, int KS,
                                             int base, int P0, int npos, int RS4, uint4* xs) {
  const int units = T * npos * 4;  // 8-element pieces
  const auto piece_at = [&](int u, int& c) {
    const int piece = u & 3, rest = u >> 2, pos = rest % npos, j = rest / npos, q = P0 + pos;
    c = ((q / KS) * S + base + q % KS) * kChunk + piece * 8 + j * K;  // x element index (fits: T · K < 2^31)
    return j * RS4 + 8 * pos + 2 * piece;
  };
  for (int u = threadIdx.x; u < units; u += kThreads) {
    int c;
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(xs + piece_at(u, c)));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(x + c));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + 16), "l"(x + c + 4));
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  for (int u = threadIdx.x; u < units; u += kThreads) {
    int c;
    uint4* at = xs + piece_at(u, c);
    const uint4 a = at[0], b = at[1];
    uint4 hi, lo;
    split8(
        make_float4(__uint_as_float(a.x), __uint_as_float(a.y), __uint_as_float(a.z), __uint_as_float(a.w)),
        make_float4(__uint_as_float(b.x), __uint_as_float(b.y), __uint_as_float(b.z), __uint_as_float(b.w)),
        hi, lo);
    at[0] = hi;
    at[1] = lo;
  }
  __syncthreads();
}

// One chunk: acc += A(rows g, g + 8: words wa, wb) · B (NB = 1: hi and lo columns in bh; NB = 2: bh then bl).
template <int NB>
__device__ __forceinline__ void mma_chunk(float (&acc)[4], const uint4& wa, const uint4& wb, const uint4& bh,
                                          const uint4& bl) {
  mma_bf16(acc, wa.x, wb.x, wa.y, wb.y, bh.x, bh.y);
  if constexpr (NB == 2) mma_bf16(acc, wa.x, wb.x, wa.y, wb.y, bl.x, bl.y);
  mma_bf16(acc, wa.z, wb.z, wa.w, wb.w, bh.z, bh.w);
  if constexpr (NB == 2) mma_bf16(acc, wa.z, wb.z, wa.w, wb.w, bl.z, bl.w);
}

// Eight E4M3 weights (k order, the lower k in the low byte) as four bf16 pairs in k order, exactly.
__device__ __forceinline__ uint4 fp8x8_to_bf16(uint2 q) {
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? q.x : q.y;
    const float2 f = e4m3x2_to_f32(word >> (16 * (i & 1)));
    o[i] = bf16x2_bits(__floats2bfloat162_rn(f.x, f.y));
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Grid: each product's blocks [first, next first), tile group = block / ck, K part (cluster rank) = block %
// ck. NB = 1 for T ≤ 4, 2 for T ≥ 5 (the file head).
template <int NB, TcKind KD>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_tc_k(const __grid_constant__ TcArgs a, const float* __restrict__ x, int T) {
  using Bits = typename TcLoad<KD>::Bits;
  constexpr int kAhead = TcLoad<KD>::kAhead;
  extern __shared__ uint4 xs[];
  __shared__ float part[kWarps * 8 * kTileRows];  // [warp][column][row] partial sums
  int pi = 0;
  while (pi + 1 < a.count && blockIdx.x >= a.p[pi + 1].first) ++pi;
  const TcProduct& p = a.p[pi];
  const unsigned block = blockIdx.x - p.first;
  const int ck = a.ck;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int K = static_cast<int>(p.w.cols), nch = K / kChunk;
  const int S = p.S, KS = p.KS, RT = kWarps / KS, KWc = p.KWc, RS4 = KWc * 8 + 1;
  const int rank = static_cast<int>(block % ck);  // = the cluster rank: 1-D clusters, first a multiple of ck
  const int64_t tg = block / ck;
  const int tl = warp / KS, wk = warp % KS, base = rank * KS, wid = base + wk;
  const int64_t r0 = (tg * RT + tl) * kTileRows;  // the warp's tile, in rows of the product
  const bool live = r0 < p.n;
  // The block's staged chunks: its KS workers' share of every run of S chunks.
  const int nchb = (nch / S) * KS + min(max(nch % S - base, 0), KS);
  const int nwin = (nchb + KWc - 1) / KWc;
  // Worker-local chunk i is global chunk wid + S · i and staged position wk + KS · i.
  const auto window_end = [&](int win) {
    const int P1 = min((win + 1) * KWc, nchb);
    return max((P1 - wk + KS - 1) / KS, win * KWc / KS);
  };
  // Row pointers at the lane's piece of chunk 0; chunk c is 4 · c loads on (64 bytes of BF16, 32 of FP8).
  const auto row_at = [&](int64_t r) -> const Bits* {
    if (!live || r >= p.n) return nullptr;
    const auto* bytes = static_cast<const uint8_t*>(p.w.data) +
                        (p.row0 + r) * static_cast<int64_t>(K) * TcLoad<KD>::kElemBytes;
    return reinterpret_cast<const Bits*>(bytes) + t;
  };
  const Bits* ra = row_at(r0 + g);
  const Bits* rb = row_at(r0 + g + 8);
  RowScale sa, sb;  // FP8 only
  if constexpr (is_fp8(KD)) {
    if (ra) sa = RowScale::of(p.w, p.row0 + r0 + g);
    if (rb) sb = RowScale::of(p.w, p.row0 + r0 + g + 8);
  }
  // A batch of kAhead chunks' weight loads (and FP8 scales) in registers.
  struct Batch {
    Bits wa[kAhead], wb[kAhead];
    uint32_t qa[kAhead], qb[kAhead];  // the chunks' raw FP8 scales
  };
  const auto load = [&](Batch& b, int i0, int i1) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int c = wid + S * (i0 + u);
      const bool in = i0 + u < i1;
      b.wa[u] = in && ra ? __ldg(ra + 4 * c) : Bits{};
      b.wb[u] = in && rb ? __ldg(rb + 4 * c) : Bits{};
      if constexpr (is_fp8(KD)) {
        b.qa[u] = in && ra ? sa.raw(c) : 0u;
        b.qb[u] = in && rb ? sb.raw(c) : 0u;
      }
    }
  };
  // B sources: lane (g, t) reads its column's 8 values [8t, 8t + 8) of each staged chunk (piece t: hi, then
  // lo one word on). T ≤ 4: column g < 4 is hi of x row g, column 4 + j lo of row j.
  const uint4 *bh, *bl;
  if constexpr (NB == 1) {
    bh = g < T ? xs + g * RS4 + 2 * t : (g >= 4 && g - 4 < T ? xs + (g - 4) * RS4 + 2 * t + 1 : xs + 2 * t);
    bl = bh;  // unused
  } else {
    bh = xs + (g < T ? g : 0) * RS4 + 2 * t;
    bl = bh + 1;
  }
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // The batch's chunks [i0, min(i0 + kAhead, i1)) of the window starting at staged position P0.
  const auto compute = [&](const Batch& b, int i0, int i1, int P0) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (i0 + u >= i1) break;
      const int pos = 8 * (wk + KS * (i0 + u) - P0);  // uint4 offset of the chunk in a row region
      if constexpr (KD == TcKind::Bf16) {
        mma_chunk<NB>(acc, b.wa[u], b.wb[u], bh[pos], NB == 2 ? bl[pos] : bh[pos]);
      } else {  // the chunk's sum alone, then times each row's scale (the file head)
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_chunk<NB>(d, fp8x8_to_bf16(b.wa[u]), fp8x8_to_bf16(b.wb[u]), bh[pos],
                      NB == 2 ? bl[pos] : bh[pos]);
        const float fa = sa.value(b.qa[u]), fb = sb.value(b.qb[u]);
        acc[0] = fmaf(fa, d[0], acc[0]);
        acc[1] = fmaf(fa, d[1], acc[1]);
        acc[2] = fmaf(fb, d[2], acc[2]);
        acc[3] = fmaf(fb, d[3], acc[3]);
      }
    }
  };

  // The first batch of weight loads goes out before waiting for the previous kernel (weights never change);
  // x and y are touched only after the wait (misc/pdl.cuh). Batch `cur` always holds chunks [i, i + kAhead).
  Batch cur, next;
  int i = 0, i1 = window_end(0);
  if (live) load(cur, 0, i1);
  pdl_wait();
  pdl_launch_dependents();
  for (int win = 0; win < nwin; ++win) {
    const int P0 = win * KWc;
    if (win > 0) __syncthreads();  // every warp is done reading the previous window
    stage_window(x, T, K, S, KS, base, P0, min(KWc, nchb - P0), RS4, xs);
    if (live) {
      for (;;) {
        if constexpr (TcLoad<KD>::kBuffers == 1) {  // load the next batch after using this one
          compute(cur, i, i1, P0);
          i += kAhead;
          if (i >= i1) break;
          load(cur, i, i1);
        } else {  // the next batch in flight while this one is used (two register sets, unrolled)
          if (i + kAhead < i1) load(next, i + kAhead, i1);
          compute(cur, i, i1, P0);
          i += kAhead;
          if (i >= i1) break;
          if (i + kAhead < i1) load(cur, i + kAhead, i1);
          compute(next, i, i1, P0);
          i += kAhead;
          if (i >= i1) break;
        }
      }
    }
    if (win + 1 < nwin) {  // the next window's first batch: in flight while it is staged
      i = (win + 1) * KWc / KS;
      i1 = window_end(win + 1);
      if (live) load(cur, i, i1);
    }
  }
  // Lane (g, t) holds rows g (acc 0, 1) and g + 8 (acc 2, 3) of columns 2t, 2t + 1.
  float* pw = part + warp * 8 * kTileRows;
  pw[(2 * t) * kTileRows + g] = acc[0];
  pw[(2 * t + 1) * kTileRows + g] = acc[1];
  pw[(2 * t) * kTileRows + g + 8] = acc[2];
  pw[(2 * t + 1) * kTileRows + g + 8] = acc[3];
  if (ck > 1)
    cg::this_cluster().sync();
  else
    __syncthreads();
  // Output (tile, x row j, row r): workers 0..S−1 in order (cluster rank, then warp), whatever the launch.
  const int per_block = RT * T * kTileRows;
  for (int o = rank + ck * static_cast<int>(threadIdx.x); o < per_block; o += ck * kThreads) {
    const int ot = o / (T * kTileRows), j = (o / kTileRows) % T, r = o % kTileRows;
    const int64_t row = (tg * RT + ot) * kTileRows + r;
    if (row >= p.n) continue;
    float hi = 0.0f, lo = 0.0f;
    for (int q = 0; q < ck; ++q) {
      const float* pq = q == rank ? part : cg::this_cluster().map_shared_rank(part, q);
      for (int k = 0; k < KS; ++k) {
        const float* pk = pq + (ot * KS + k) * 8 * kTileRows;
        hi += pk[j * kTileRows + r];
        if constexpr (NB == 1) lo += pk[(4 + j) * kTileRows + r];
      }
    }
    store_product(p.e, j, p.y + j * p.n + row, NB == 1 ? hi + lo : hi);
  }
  if (ck > 1) cg::this_cluster().sync();  // the other blocks' partials stay until every block has read them
}

// Warps a product should have to cover the card (H200: 132 SMs × 16 warps, a quarter to half of an SM's slots
// with this kernel's registers).
constexpr int64_t kWarpsWanted = 132 * 16;

struct Plan {
  int S = 1, KS = 1, CK = 1, KWc = 0;
  unsigned blocks = 0;
};

// The split of a product [n, K] at T rows of x: S doubles until the card is covered, each worker keeping at
// least two chunks (a lone chunk a worker would make the cross-warp sum cost more than it saves) and S ≤ 64.
// S alone fixes the sums (file head), so a product gives the same bits alone and in a group.
Plan plan_for(int64_t n, int K, int T) {
  Plan pl;
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  const int nch = K / kChunk;
  while (pl.S < kMaxSplits && tiles * pl.S < kWarpsWanted && nch / (2 * pl.S) >= 2) pl.S *= 2;
  pl.KS = std::min(pl.S, kWarps);
  pl.CK = pl.S / pl.KS;
  const int RT = kWarps / pl.KS;
  pl.blocks = static_cast<unsigned>((tiles + RT - 1) / RT * pl.CK);
  // The window: as many of the block's chunks as kStageBytes holds (hi + lo, 4 bytes an element, 16 bytes of
  // padding per x row so two lane groups reading neighbouring rows meet different banks).
  const int fits = ((kStageBytes / T - 16) / (4 * kChunk)) / pl.KS * pl.KS;
  const int most = (nch + pl.S - 1) / pl.S * pl.KS;
  pl.KWc = std::min(fits, most);
  return pl;
}

size_t stage_bytes(int T, int KWc) {
  return static_cast<size_t>(T) * (KWc * 8 + 1) * 16;
}

// kernel<<<blocks, kThreads, smem, s>>> with programmatic dependent launch (when enabled) and clusters of ck
// blocks (when ck > 1); a failure is left for the caller's BLOOMERY_CUDA_CHECK_LAUNCH.
template <TcKind KD>
void launch(const TcArgs& a, unsigned blocks, size_t smem, const float* x, int T, cudaStream_t s) {
  cudaLaunchAttribute attrs[2]{};
  int na = 0;
  if (pdl_enabled()) {
    attrs[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[na++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (a.ck > 1) {
    attrs[na].id = cudaLaunchAttributeClusterDimension;
    attrs[na].val.clusterDim.x = static_cast<unsigned>(a.ck);
    attrs[na].val.clusterDim.y = 1;
    attrs[na++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attrs;
  cfg.numAttrs = na;
  if (T <= 4)
    (void)cudaLaunchKernelEx(&cfg, gemv_tc_k<1, KD>, a, x, T);
  else
    (void)cudaLaunchKernelEx(&cfg, gemv_tc_k<2, KD>, a, x, T);
}

void launch(TcKind kind, const TcArgs& a, unsigned blocks, size_t smem, const float* x, int T,
            cudaStream_t s) {
  if (kind == TcKind::Bf16)
    launch<TcKind::Bf16>(a, blocks, smem, x, T, s);
  else
    launch<TcKind::Fp8>(a, blocks, smem, x, T, s);
}

// A window of kStageBytes plus the static partials passes the 48 KB a launch gets without asking (plan_for
// keeps every window within kStageBytes).
void opt_in_smem() {
  opt_in_shared_memory(reinterpret_cast<const void*>(gemv_tc_k<1, TcKind::Bf16>), kStageBytes, "gemv_tc");
  opt_in_shared_memory(reinterpret_cast<const void*>(gemv_tc_k<2, TcKind::Bf16>), kStageBytes, "gemv_tc");
  opt_in_shared_memory(reinterpret_cast<const void*>(gemv_tc_k<1, TcKind::Fp8>), kStageBytes, "gemv_tc");
  opt_in_shared_memory(reinterpret_cast<const void*>(gemv_tc_k<2, TcKind::Fp8>), kStageBytes, "gemv_tc");
}

// Adds a product to a launch's arguments; returns the launch's blocks after it.
unsigned add_product(TcArgs& a, const DeviceWeight& w, int64_t row0, int64_t n, float* y, const Epilogue& e,
                     const Plan& pl, unsigned first) {
  TcProduct& p = a.p[a.count++];
  p.w = w, p.y = y, p.e = e, p.row0 = row0, p.n = n;
  p.S = pl.S, p.KS = pl.KS, p.KWc = pl.KWc, p.first = first;
  return first + pl.blocks;
}

std::string shape_of(const DeviceWeight& w, int T) {
  return "W[" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] x[" + std::to_string(T) + "]";
}

std::atomic<bool>& tc_slot() {
  static std::atomic<bool> on{!env_is("BLOOMERY_CUDA_GEMV_TC", "0")};
  return on;
}

}  // namespace

bool gemv_tc() {
  return tc_slot().load(std::memory_order_relaxed);
}

void set_gemv_tc(bool on) {
  tc_slot().store(on, std::memory_order_relaxed);
}

std::atomic<bool>& fp8_slot() {
  static std::atomic<bool> on{!env_is("BLOOMERY_CUDA_GEMV_TC_FP8", "0")};
  return on;
}

bool fp8_on_tc() {
  return fp8_slot().load(std::memory_order_relaxed);
}

void set_gemv_tc_fp8(bool on) {
  fp8_slot().store(on, std::memory_order_relaxed);
}

bool gemv_tc_fits(const DeviceWeight& w, const float* x, int T) {
  // BF16, or the FP8 family with a scale per chunk (FP8 block: tiles a multiple of 32 wide).
  const bool format_fits = w.format == FormatId::BF16 || (fp8_on_tc() && RowScale::fits(w));
  return format_fits && T >= kGemvTcMinRows && T <= kGemvMaxRows && w.cols >= 2 * kChunk &&
         w.cols % kChunk == 0 && w.cols <= (1u << 30) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void gemv_tc_product(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y,
                     cudaStream_t s, const Epilogue& e) {
  const Plan pl = plan_for(n, static_cast<int>(w.cols), T);
  TcArgs a{};
  a.ck = pl.CK;
  const unsigned blocks = add_product(a, w, row0, n, y, e, pl, 0);
  opt_in_smem();
  launch(tc_kind(w.format), a, blocks, stage_bytes(T, pl.KWc), x, T, s);
  BLOOMERY_CUDA_CHECK_LAUNCH("gemv_tc " + std::string(format_name(w.format)) + " " + shape_of(w, T) +
                             " rows " + std::to_string(row0) + "+" + std::to_string(n) + " splits " +
                             std::to_string(pl.S));
}

void gemv_tc_group(std::span<const GemvProduct> ps, const float* x, int T, cudaStream_t s) {
  // A launch has one element kind and one cluster size: one launch per pair present, up to kGroupMax products
  // each, in order.
  opt_in_smem();
  std::vector<Plan> plans;
  for (const GemvProduct& p : ps)
    plans.push_back(plan_for(static_cast<int64_t>(p.w.rows), static_cast<int>(p.w.cols), T));
  for (const TcKind kind : {TcKind::Bf16, TcKind::Fp8})
    for (int ck = 1; ck <= kMaxSplits / kWarps; ck *= 2) {
      TcArgs a{};
      a.ck = ck;
      unsigned blocks = 0;
      size_t smem = 0;
      const auto flush = [&] {
        if (a.count == 0) return;
        launch(kind, a, blocks, smem, x, T, s);
        BLOOMERY_CUDA_CHECK_LAUNCH("gemv_tc group of " + std::to_string(a.count) + " products, first " +
                                   std::string(format_name(a.p[0].w.format)) + " " + shape_of(a.p[0].w, T) +
                                   " cluster " + std::to_string(ck));
        a.count = 0, blocks = 0, smem = 0;
      };
      for (size_t i = 0; i < ps.size(); ++i) {
        if (plans[i].CK != ck || tc_kind(ps[i].w.format) != kind) continue;
        if (a.count == kGroupMax) flush();
        blocks = add_product(a, ps[i].w, 0, static_cast<int64_t>(ps[i].w.rows), ps[i].y, ps[i].e, plans[i],
                             blocks);
        smem = std::max(smem, stage_bytes(T, plans[i].KWc));
      }
      flush();
    }
}

}  // namespace bloomery::cuda
