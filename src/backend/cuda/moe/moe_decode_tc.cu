// Routed-expert decode on the tensor cores for NVFP4 experts (moe_decode_variant() 3): the same products as
// gate_up_v2 / down_v2 (moe_decode.cu), but a warp reads a tile of 16 weight rows and feeds them to
// mma.sync m16n8k16 (f16 in, f32 accumulate) against the pair's activation row, so
//  - an element costs about three instructions (two for its half of an E2M1 pair decoded into an f16x2,
//    half a multiply by its block scale, an eighth of an MMA) instead of about ten (measured with ncu on the
//    variant-2 gate+up: 9.8 warp instructions per weight element, issue-bound at 46 % of the slots);
//  - the activations are read once per 16 rows from shared memory instead of once per row from L1.
// Hand-written because no library reads NVFP4 with E4M3 block scales on sm_90 (cuBLASLt's block-scaled FP4
// needs sm_100).
//
// Exactness. An E2M1 code moved into f16 bits 9-15 is its value times 2^-14 exactly (codes 0 and 1 become f16
// subnormals), and times its E4M3 block scale it stays exact in f16 (at most 6 significant bits, every
// product a multiple of 2^-24, the largest 6 · 448 · 2^-14): the A operand is the stored weight without
// rounding. The activation row is scaled by a power of two 2^c that puts max|x| in [2^14, 2^15) and split
// into f16 hi + lo (x·2^c = hi + lo to about 2^-22 relative): column 0 of the B operand holds hi, column 1
// lo, so one MMA gives both partial sums. A row's result is (hi sum + lo sum) · 2^(14 − c) · NVFP4's global.
// Versus variant 2: the activation keeps ~22 of its 24 bits and the tensor core's f32 accumulation order is
// its own; the sums repeat bit for bit (fixed hardware order, fixed reduction order over K slices).
//
// Layout. Thread (g = lane / 4, t = lane % 4) holds, per MMA, rows g and g + 8 of the tile at four logical k
// positions. A dot product does not care which physical k a logical k is, as long as A and B agree, so
// thread t takes every fourth 16-element scale block of each row (one 8-byte load and one scale byte per
// block; the group's four lanes read a full 32-byte sector), and within a block the four MMA k-steps s = 0..3
// take elements (s, s + 4) of its first word and (8 + s, 12 + s) of its second — the two nibbles of a pair
// sit 16 bits apart, as the halves of an f16x2 do. The staged activations are stored in that order per block,
// so B is two 16-byte shared loads per block (lanes 0-3 read hi, 4-7 lo, the rest a zero block).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/mma.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/moe/moe_tc.h"
#include "backend/cuda/moe/routed.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kTileRows = 16;
constexpr int kBlockElems = 16;  // one NVFP4 scale block: 8 bytes, one E4M3 scale
constexpr int kMaxK = 8192;      // the staged activation row: 2 · K f16 + a zero block, 32 KB at most

// Nibbles s and s + 4 (s = 0..3) of `word` as an f16x2 (low half nibble s), each E2M1 value times 2^-14.
__device__ __forceinline__ uint32_t e2m1_pair_f16(uint32_t word, int s) {
  const uint32_t q = word << (12 - 4 * s);  // the pair's nibbles at bits 12-15 and 28-31
  return (q & 0x80008000u) | ((q & 0x70007000u) >> 3);
}

__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, __half2 s) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), s);
  return *reinterpret_cast<const uint32_t*>(&r);
}

__device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 2^e as f32 for e in [-126, 127].
__device__ __forceinline__ float pow2(int e) {
  return __int_as_float((127 + e) << 23);
}

// Where the staged row's parts start in shared memory (words): hi, lo (4 words on, so that a lane reading hi
// and its partner reading lo meet different banks), then the zero block of 8 words.
__host__ __device__ constexpr int lo_offset(int K) {
  return K / 2 + 4;
}
__host__ __device__ constexpr int zero_offset(int K) {
  return K + 4;
}

// Stages the activation row xr[0..K) into xs (hi, lo and the zero block, at the offsets above) in the
// per-block pair order above, scaled by 2^c; returns 2^(14 − c), the row results' power-of-two factor. All
// threads.
__device__ float stage_row(const float* __restrict__ xr, int K, uint32_t* xs, float* scratch) {
  const int tid = threadIdx.x;
  const float4* x4 = reinterpret_cast<const float4*>(xr);
  float m = 0.0f;
  for (int i = tid; i < K / 4; i += kThreads) {
    const float4 v = __ldg(x4 + i);
    m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
  }
  // block_reduce_max's cross-warp step for a fixed four warps: one barrier instead of three.
  m = warp_reduce_max(m);
  if ((tid & 31) == 0) scratch[tid >> 5] = m;
  if (tid < 8) xs[zero_offset(K) + tid] = 0u;
  __syncthreads();
  m = fmaxf(fmaxf(scratch[0], scratch[1]), fmaxf(scratch[2], scratch[3]));
  // max|x| = f · 2^e, f in [0.5, 1): c = 15 − e puts it in [2^14, 2^15). A zero or non-finite row keeps c = 0
  // (inf and NaN then flow through the f16 values as they would through f32).
  int c = 0;
  if (m > 0.0f && m <= 3.402823466e38f) {
    int e = 0;
    frexpf(m, &e);
    c = min(15 - e, 126);
  }
  const float scale = pow2(c);
  uint32_t* hi = xs;
  uint32_t* lo = xs + lo_offset(K);
  for (int b = tid; b < K / kBlockElems; b += kThreads) {
    float v[16], h[16], l[16];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 a = __ldg(x4 + 4 * b + i);
      v[4 * i] = a.x * scale, v[4 * i + 1] = a.y * scale, v[4 * i + 2] = a.z * scale,
            v[4 * i + 3] = a.w * scale;
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      h[i] = __half2float(__float2half_rn(v[i]));
      l[i] = v[i] - h[i];  // exact in f32
    }
    uint32_t wh[8], wl[8];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      wh[s] = half2_bits(h[s], h[s + 4]), wh[4 + s] = half2_bits(h[8 + s], h[12 + s]);
      wl[s] = half2_bits(l[s], l[s + 4]), wl[4 + s] = half2_bits(l[8 + s], l[12 + s]);
    }
    uint4* ph = reinterpret_cast<uint4*>(hi + 8 * b);
    uint4* pl = reinterpret_cast<uint4*>(lo + 8 * b);
    ph[0] = make_uint4(wh[0], wh[1], wh[2], wh[3]), ph[1] = make_uint4(wh[4], wh[5], wh[6], wh[7]);
    pl[0] = make_uint4(wl[0], wl[1], wl[2], wl[3]), pl[1] = make_uint4(wl[4], wl[5], wl[6], wl[7]);
  }
  __syncthreads();
  return pow2(14 - c);
}

// Raw loads of one scale block of rows g and g + 8 of one matrix.
struct RawBlock {
  uint2 a, b;       // rows g, g + 8: 16 E2M1 codes each
  uint32_t scales;  // E4M3 scale bytes: row g in bits 0-7, row g + 8 in bits 8-15
};

__device__ __forceinline__ RawBlock load_block(const uint2* ra, const uint2* rb, const uint8_t* sa,
                                               const uint8_t* sb, int blk) {
  RawBlock r;
  r.a = ra ? __ldg(ra + blk) : make_uint2(0u, 0u);
  r.b = rb ? __ldg(rb + blk) : make_uint2(0u, 0u);
  r.scales = (sa ? static_cast<uint32_t>(__ldg(sa + blk)) : 0u) |
             (sb ? static_cast<uint32_t>(__ldg(sb + blk)) << 8 : 0u);
  return r;
}

// The four MMA k-steps of one scale block: acc += A(block) · B(staged activations of the block).
__device__ __forceinline__ void mma_block(float (&acc)[4], const RawBlock& r, uint4 b_lo, uint4 b_hi) {
  const __half2_raw s = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(r.scales), __NV_E4M3);
  const __half2 s2 = *reinterpret_cast<const __half2*>(&s);
  const __half2 sa = __low2half2(s2), sb = __high2half2(s2);
  const uint32_t bl[4] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w}, bh[4] = {b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
  for (int k = 0; k < 4; ++k)
    mma_f16(acc, hmul2_bits(e2m1_pair_f16(r.a.x, k), sa), hmul2_bits(e2m1_pair_f16(r.b.x, k), sb),
            hmul2_bits(e2m1_pair_f16(r.a.y, k), sa), hmul2_bits(e2m1_pair_f16(r.b.y, k), sb), bl[k], bh[k]);
}

// Rows g and g + 8 of a tile of matrix w (null pointers for rows past the end: they read as zero).
struct TileRows {
  const uint2* ra = nullptr;
  const uint2* rb = nullptr;
  const uint8_t* sa = nullptr;
  const uint8_t* sb = nullptr;
};

__device__ __forceinline__ TileRows tile_rows(const DeviceWeight& w, int64_t row0, int g, int64_t blk0) {
  const int64_t bpr = static_cast<int64_t>(w.cols) / kBlockElems;  // blocks per row
  const int64_t r0 = row0 + g, r1 = row0 + g + 8, R = static_cast<int64_t>(w.rows);
  TileRows t;
  if (r0 < R) {
    t.ra = static_cast<const uint2*>(w.data) + r0 * bpr + blk0;
    t.sa = w.block_scales + r0 * bpr + blk0;
  }
  if (r1 < R) {
    t.rb = static_cast<const uint2*>(w.data) + r1 * bpr + blk0;
    t.sb = w.block_scales + r1 * bpr + blk0;
  }
  return t;
}

// Blocks of raw loads issued before any is decoded: one matrix 10 (80 bytes of codes a row in flight per
// lane), gate+up 5 of each.
template <int M>
constexpr int kAhead = M == 2 ? 5 : 10;

// A lane's raw loads of kAhead<M> scale blocks of its rows of the M matrices (M = 2: gate and up, which share
// the staged activations).
template <int M>
struct Batch {
  RawBlock raw[kAhead<M>][M];
};

// Lane t's blocks of a warp's K slice are t, t + 4, t + 8, …: the four lanes of a group read 32 consecutive
// bytes of a row (one full sector) per load, instead of each lane a run of its own.
constexpr int kLaneStride = 4;

template <int M>
__device__ __forceinline__ void load_batch(const TileRows (&tr)[M], int u0, int nblk, Batch<M>& b) {
#pragma unroll
  for (int i = 0; i < kAhead<M>; ++i)
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (u0 + i < nblk)
        b.raw[i][m] = load_block(tr[m].ra, tr[m].rb, tr[m].sa, tr[m].sb, kLaneStride * (u0 + i));
}

// acc[m] += the batch's MMAs. bx: the lane's B source, `step` uint4 per lane block (0 for the zero block).
template <int M>
__device__ __forceinline__ void mma_batch(const Batch<M>& b, const uint4* bx, int step, int u0, int nblk,
                                          float (&acc)[M][4]) {
#pragma unroll
  for (int i = 0; i < kAhead<M>; ++i) {
    if (u0 + i >= nblk) break;
    const uint4 b_lo = bx[step * (u0 + i)], b_hi = bx[step * (u0 + i) + 1];
#pragma unroll
    for (int m = 0; m < M; ++m) mma_block(acc[m], b.raw[i][m], b_lo, b_hi);
  }
}

// Grid (ceil(rows / 16 / (kWarps / KS)), P): a block's warps are kWarps / KS tiles × KS slices of K.
// M = 2 (gate+up): a tile is 16 gate rows and the same 16 up rows of expert ids[p] against x[p / k]; out =
// h [P, I], h = silu(min(g, lim)) · clamp(u, −lim, lim) (no clamp at lim 0), as gate_up_v2. M = 1 (down): 16
// rows of down against h[p]; out = y [P, D]. A pair routed to a missing expert or an id outside [0, E) gets
// NaN rows.
template <int M, int KS>
__global__ void __launch_bounds__(kThreads)
    experts_tc(MoeTable tab, const int32_t* __restrict__ ids, int k, const float* __restrict__ in,
               int64_t rows, float limit, float* __restrict__ out) {
  extern __shared__ uint4 xs4[];
  uint32_t* xs = reinterpret_cast<uint32_t*>(xs4);
  __shared__ float scratch[kWarps];
  __shared__ float part[kWarps][M][kTileRows];
  pdl_wait();
  pdl_launch_dependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t p = blockIdx.y;
  const int64_t row0 = (blockIdx.x * static_cast<int64_t>(kWarps / KS) + warp / KS) * kTileRows;
  float* op = out + p * rows;
  const int32_t e = ids[p];
  const DeviceWeight* first = M == 2 ? tab.gate : tab.down;
  if (!routed_ok(first, tab.E, e)) {  // same e for the whole block: uniform exit
    if (warp % KS == 0 && lane < kTileRows && row0 + lane < rows) op[row0 + lane] = NAN;
    return;
  }
  DeviceWeight w[M];
  if constexpr (M == 2)
    w[0] = tab.gate[e], w[1] = tab.up[e];
  else
    w[0] = tab.down[e];
  const int K = static_cast<int>(w[0].cols);
  const int nblk = K / (KS * kLaneStride * kBlockElems);  // scale blocks per lane per row
  const int64_t blk0 = static_cast<int64_t>(warp % KS) * (K / kBlockElems / KS) + t;
  TileRows tr[M];
#pragma unroll
  for (int m = 0; m < M; ++m) tr[m] = tile_rows(w[m], row0, g, blk0);
  // The first batch of weight loads goes out before the activations are staged (weights need no wait).
  Batch<M> batch;
  const bool live = row0 < rows;
  if (live) load_batch<M>(tr, 0, nblk, batch);
  const float post = stage_row(in + (M == 2 ? p / k : p) * static_cast<int64_t>(K), K, xs, scratch);
  // Lanes 0-3 feed B's column 0 (hi), 4-7 column 1 (lo), the rest the zero block.
  const uint32_t* bsrc =
      g == 0 ? xs + 8 * blk0 : (g == 1 ? xs + lo_offset(K) + 8 * blk0 : xs + zero_offset(K));
  const uint4* bx = reinterpret_cast<const uint4*>(bsrc);
  const int step = g < 2 ? 2 * kLaneStride : 0;
  float acc[M][4] = {};
  if (live) {
    for (int u0 = 0;;) {
      mma_batch<M>(batch, bx, step, u0, nblk, acc);
      u0 += kAhead<M>;
      if (u0 >= nblk) break;
      load_batch<M>(tr, u0, nblk, batch);
    }
  }
  // Lane t = 0 of group g holds rows g (acc[m][0] hi, [1] lo) and g + 8 ([2], [3]).
  if (t == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      part[warp][m][g] = acc[m][0] + acc[m][1];
      part[warp][m][g + 8] = acc[m][2] + acc[m][3];
    }
  }
  __syncthreads();
  if (warp % KS != 0 || lane >= kTileRows || row0 + lane >= rows) return;
  float s[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    s[m] = 0.0f;
#pragma unroll
    for (int j = 0; j < KS; ++j) s[m] += part[warp + j][m][lane];  // fixed order over the K slices
    s[m] = s[m] * post * w[m].global;
  }
  if constexpr (M == 2) {
    float gs = s[0], us = s[1];
    if (limit > 0.0f) {
      gs = fminf(gs, limit);
      us = fminf(fmaxf(us, -limit), limit);
    }
    op[row0 + lane] = act_apply(kActSilu, gs) * us;
  } else {
    op[row0 + lane] = s[0];
  }
}

// K slices per tile: as many as K allows (up to four), so a block's four warps share one tile's staged row;
// down keeps one slice and four tiles a block.
int slices_for(int M, uint64_t K) {
  if (M == 1) return 1;
  for (int ks : {4, 2})
    if (K % (static_cast<uint64_t>(ks) * 4 * kBlockElems) == 0) return ks;
  return 1;
}

template <int M>
void launch_tc(const MoeTable& tab, const int32_t* ids, int64_t P, int k, const float* in, int64_t K,
               int64_t rows, float limit, float* out, cudaStream_t s) {
  const int ks = slices_for(M, static_cast<uint64_t>(K));
  const int64_t rows_per_block = static_cast<int64_t>(kWarps / ks) * kTileRows;
  const dim3 grid(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block),
                  static_cast<unsigned>(P));
  const size_t smem = static_cast<size_t>(zero_offset(static_cast<int>(K)) + 8) * 4;
  if constexpr (M == 2) {  // down runs one slice only (slices_for): no other instantiation
    if (ks == 4)
      return pdl_launch(experts_tc<M, 4>, grid, kThreads, smem, s, tab, ids, k, in, rows, limit, out);
    if (ks == 2)
      return pdl_launch(experts_tc<M, 2>, grid, kThreads, smem, s, tab, ids, k, in, rows, limit, out);
  }
  pdl_launch(experts_tc<M, 1>, grid, kThreads, smem, s, tab, ids, k, in, rows, limit, out);
}

}  // namespace

bool moe_tc_fits(FormatId fmt, uint64_t K) {
  return is_nvfp4(fmt) && K > 0 && K % (4 * kBlockElems) == 0 && K <= kMaxK;
}

void moe_gate_up_tc(const MoeTable& tab, const int32_t* ids, int64_t P, int k, const float* x, int64_t D,
                    int64_t I, float limit, float* h, cudaStream_t s) {
  launch_tc<2>(tab, ids, P, k, x, D, I, limit, h, s);
}

void moe_down_tc(const MoeTable& tab, const int32_t* ids, int64_t P, const float* h, int64_t I, int64_t D,
                 float* y, cudaStream_t s) {
  launch_tc<1>(tab, ids, P, 1, h, I, D, 0.0f, y, s);
}

}  // namespace bloomery::cuda
