// Routed-expert decode kernels that read the routed ids on the card (no host round trip, graph-capturable):
// one launch computes gate and up of every (token, slot) pair with the SwiGLU fused, one launch computes
// down of every pair, and one sums the k slots of each token in a fixed order (no float atomics, so the
// result is reproducible and equals the CPU backend's order). Weights are read in their stored formats in
// 16-byte units as the GEMV does (decode_unit, weight_access.cuh: table-free FP4 and FP8 decoders,
// bit-identical to the CPU), so NVFP4 / MXFP8 / FP8 block / BF16 all work.
//
// Work split: a warp is cut into G groups of 32/G lanes; each group owns R consecutive weight rows of one
// pair and its lanes stride over the row's 16-byte units, loading the activation chunk of a unit once for
// all R rows (and for gate and up together). G is picked so that the units of a row fill the lanes (the
// qwen4_exp down row of K = 640 NVFP4 elements is 40 units: 4 groups of 8 lanes × 5 units, no idle lane).
//
// Three versions of gate+up and down, chosen by moe_decode_variant() (BLOOMERY_CUDA_MOE_DECODE=1|2|3; the
// bench's --ab moe flips 1 and 2): 1 (gate_up_k / down_k) decodes every element fully scaled (bit-identical
// weights to the CPU, R rows per group); 2 (gate_up_v2 / down_v2, below) loads several raw units per lane
// ahead and applies the scales to partial sums, as GEMV variant 2 does. Only the rounding order differs. 3,
// the default, runs NVFP4 experts on the tensor cores (moe_decode_tc.cu; --ab moe-tc flips 2 and 3) and the
// other formats as 2.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/moe/moe_kernels.h"
#include "backend/cuda/moe/moe_tc.h"
#include "backend/cuda/moe/routed.cuh"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block

template <int U>
__device__ __forceinline__ void load_vec(const float* __restrict__ p, float* v) {
  const float4* q = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int i = 0; i < U / 4; ++i) {
    const float4 a = __ldg(q + i);
    v[4 * i] = a.x, v[4 * i + 1] = a.y, v[4 * i + 2] = a.z, v[4 * i + 3] = a.w;
  }
}

template <int U>
__device__ __forceinline__ float dot_acc(const float* w, const float* x, float acc) {
#pragma unroll
  for (int i = 0; i < U; ++i) acc = fmaf(w[i], x[i], acc);
  return acc;
}

// Sum over the L lanes of a group (xor partners stay inside an aligned group of L lanes).
template <int L>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// Grid (ceil(I / rows per block), P). h[p, r] = silu(min(g, lim)) · clamp(u, −lim, lim) (no clamp at lim 0).
template <Width W, int G, int R>
__global__ void __launch_bounds__(kWarps * 32)
    gate_up_k(MoeTable tab, const int32_t* __restrict__ ids, int k, const float* __restrict__ x, int64_t I,
              float limit, float* __restrict__ h) {
  pdl_wait();
  pdl_launch_dependents();
  constexpr int U = Unit<W>::kElems, L = 32 / G;
  const int lane = threadIdx.x & 31, sub = lane % L;
  const int64_t warp_row0 = (blockIdx.x * static_cast<int64_t>(kWarps) + (threadIdx.x >> 5)) * G * R;
  if (warp_row0 >= I) return;  // whole warp: no shuffle partner is lost
  const int64_t p = blockIdx.y, r0 = warp_row0 + (lane / L) * R;
  const int rows = I - r0 <= 0 ? 0 : (I - r0 < R ? static_cast<int>(I - r0) : R);
  float* hp = h + p * I;
  const int32_t e = ids[p];
  if (!routed_ok(tab.gate, tab.E, e)) {  // same e for the whole block: uniform exit
    if (sub < rows) hp[r0 + sub] = NAN;
    return;
  }
  const DeviceWeight g = tab.gate[e], u = tab.up[e];
  const uint64_t units = g.cols / U;
  const float* xr = x + (p / k) * static_cast<int64_t>(g.cols);
  float ag[R] = {}, au[R] = {};
  if (rows > 0) {
#pragma unroll 2
    for (uint64_t q = sub; q < units; q += L) {
      float xv[U];
      load_vec<U>(xr + q * U, xv);
#pragma unroll
      for (int j = 0; j < R; ++j)
        if (j < rows) {
          float v[U];
          decode_unit<W>(g, r0 + j, q * U, v);
          ag[j] = dot_acc<U>(v, xv, ag[j]);
          decode_unit<W>(u, r0 + j, q * U, v);
          au[j] = dot_acc<U>(v, xv, au[j]);
        }
    }
  }
#pragma unroll
  for (int j = 0; j < R; ++j) {
    float gs = group_sum<L>(ag[j]), us = group_sum<L>(au[j]);
    if (sub == 0 && j < rows) {
      if (limit > 0.0f) {
        gs = fminf(gs, limit);
        us = fminf(fmaxf(us, -limit), limit);
      }
      hp[r0 + j] = act_apply(kActSilu, gs) * us;
    }
  }
}

// Grid (ceil(D / rows per block), P). y[p, r] = down_e[r, :] · h[p, :].
template <Width W, int G, int R>
__global__ void __launch_bounds__(kWarps * 32)
    down_k(MoeTable tab, const int32_t* __restrict__ ids, const float* __restrict__ h, int64_t I, int64_t D,
           float* __restrict__ y) {
  pdl_wait();
  pdl_launch_dependents();
  constexpr int U = Unit<W>::kElems, L = 32 / G;
  const int lane = threadIdx.x & 31, sub = lane % L;
  const int64_t warp_row0 = (blockIdx.x * static_cast<int64_t>(kWarps) + (threadIdx.x >> 5)) * G * R;
  if (warp_row0 >= D) return;
  const int64_t p = blockIdx.y, r0 = warp_row0 + (lane / L) * R;
  const int rows = D - r0 <= 0 ? 0 : (D - r0 < R ? static_cast<int>(D - r0) : R);
  float* yp = y + p * D;
  const int32_t e = ids[p];
  if (!routed_ok(tab.down, tab.E, e)) {
    if (sub < rows) yp[r0 + sub] = NAN;
    return;
  }
  const DeviceWeight w = tab.down[e];
  const uint64_t units = I / U;
  const float* hr = h + p * I;
  float acc[R] = {};
  if (rows > 0) {
#pragma unroll 2
    for (uint64_t q = sub; q < units; q += L) {
      float hv[U];
      load_vec<U>(hr + q * U, hv);
#pragma unroll
      for (int j = 0; j < R; ++j)
        if (j < rows) {
          float v[U];
          decode_unit<W>(w, r0 + j, q * U, v);
          acc[j] = dot_acc<U>(v, hv, acc[j]);
        }
    }
  }
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const float s = group_sum<L>(acc[j]);
    if (sub == 0 && j < rows) yp[r0 + j] = s;
  }
}

// ---- variant 2 -----------------------------------------------------------------------------------------
// As the GEMV's gemv_split: each lane issues the loads of kAhead raw units (gate+up: of both rows) before it
// decodes any, so all of a pass's bytes are in flight at once; the unit's scale multiplies its 16-element
// partial dot product and NVFP4's global the row's sum, so an element costs its decode and one FMA (variant
// 1: two scale multiplies on top). One row (gate+up: one row of each) per group of L = 32/G lanes, so a
// thread keeps one or two accumulators, and __launch_bounds__ caps registers for occupancy. The summation
// order is fixed (lane partials, then a fixed xor tree), so results repeat bit for bit.

// Raw units per lane per pass. One pass covers the qwen4_exp NVFP4 rows (gate/up D = 2560: 160 units = 32
// lanes × 5; down I = 640: 40 units = 8 lanes × 5). gate+up hold two units per step (gate's and up's), so
// the 16-byte widths take fewer: FP8 3 (4 spills at gate+up's 96-register cap, and at down's 64; ptxas -v,
// sm_90a), half / F32 2 (units of 8 / 4 elements: more passes, but no register pressure).
template <Width W>
constexpr int kAheadGateUp = W == Width::Fp4 ? 5 : (W == Width::Fp8 ? 3 : 2);
template <Width W>
constexpr int kAheadDown = W == Width::Fp4 ? 5 : (W == Width::Fp8 ? 3 : 4);
// Blocks of kWarps warps per SM the register caps aim at (ptxas -v, sm_90a, no spills at these): down
// 10 (≤ 48 registers, 62 %; variant 1's NVFP4 down: 64, 50 %), FP8 8 (≤ 64: it spills at 48); gate+up keeps
// two rows' raw units, 7 (≤ 72, 44 %; variant 1's NVFP4 gate+up: 118 registers, 4 blocks, 25 %), FP8 5
// (≤ 96: its scale lookup takes more registers and spills at 72).
template <Width W>
constexpr int kMinBlocksDown = W == Width::Fp8 ? 8 : 10;
template <Width W>
constexpr int kMinBlocksGateUp = W == Width::Fp8 ? 5 : 7;

template <Width W>
__device__ __forceinline__ float unit_dot(const RawUnit<W>& r, bool f16, const float* xv) {
  constexpr int E = Unit<W>::kElems;
  float v[E];
  unscaled_unit<W>(r, f16, v);
  return dot_acc<E>(v, xv, 0.0f);
}

// acc + the unit's scaled partial (F32 / half widths carry no scale: a plain add).
template <Width W>
__device__ __forceinline__ float add_partial(const RawUnit<W>& r, float p, float acc) {
  if constexpr (W == Width::Fp8 || W == Width::Fp4)
    return fmaf(r.s, p, acc);
  else
    return acc + p;
}

// Grid (ceil(I / (kWarps · G)), P): one gate row and the same up row per group. Output as gate_up_k.
template <Width W, int G>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocksGateUp<W>)
    gate_up_v2(MoeTable tab, const int32_t* __restrict__ ids, int k, const float* __restrict__ x, int64_t I,
               float limit, float* __restrict__ h) {
  pdl_wait();
  pdl_launch_dependents();
  constexpr int E = Unit<W>::kElems, L = 32 / G, A = kAheadGateUp<W>;
  const int lane = threadIdx.x & 31, sub = lane % L;
  const int64_t warp_row0 = (blockIdx.x * static_cast<int64_t>(kWarps) + (threadIdx.x >> 5)) * G;
  if (warp_row0 >= I) return;  // whole warp: no shuffle partner is lost
  const int64_t p = blockIdx.y, r = warp_row0 + lane / L;
  const bool active = r < I;
  float* hp = h + p * I;
  const int32_t e = ids[p];
  if (!routed_ok(tab.gate, tab.E, e)) {  // same e for the whole block: uniform exit
    if (sub == 0 && active) hp[r] = NAN;
    return;
  }
  const DeviceWeight g = tab.gate[e], u = tab.up[e];
  const uint64_t units = g.cols / E;
  // gate and up share a width, not necessarily a format (BF16 with F16).
  const bool g16 = g.format == FormatId::F16, u16 = u.format == FormatId::F16;
  const float* xr = x + (p / k) * static_cast<int64_t>(g.cols);
  float ag = 0.0f, au = 0.0f;
  if (active) {
    for (uint64_t q0 = sub; q0 < units; q0 += static_cast<uint64_t>(L) * A) {
      RawUnit<W> rg[A], ru[A];
#pragma unroll
      for (int i = 0; i < A; ++i) {
        const uint64_t q = q0 + static_cast<uint64_t>(i) * L;
        if (q < units) {
          rg[i] = load_unit<W>(g, r, q * E);
          ru[i] = load_unit<W>(u, r, q * E);
        } else {
          rg[i] = RawUnit<W>{}, ru[i] = RawUnit<W>{};
        }
      }
#pragma unroll
      for (int i = 0; i < A; ++i) {
        const uint64_t q = q0 + static_cast<uint64_t>(i) * L;
        if (q >= units) break;
        float xv[E];
        load_vec<E>(xr + q * E, xv);
        ag = add_partial<W>(rg[i], unit_dot<W>(rg[i], g16, xv), ag);
        au = add_partial<W>(ru[i], unit_dot<W>(ru[i], u16, xv), au);
      }
    }
  }
  float gs = group_sum<L>(ag), us = group_sum<L>(au);
  if (sub == 0 && active) {
    gs *= row_post_scale<W>(g);
    us *= row_post_scale<W>(u);
    if (limit > 0.0f) {
      gs = fminf(gs, limit);
      us = fminf(fmaxf(us, -limit), limit);
    }
    hp[r] = act_apply(kActSilu, gs) * us;
  }
}

// Grid (ceil(D / (kWarps · G)), P): one down row per group. Output as down_k.
template <Width W, int G>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocksDown<W>)
    down_v2(MoeTable tab, const int32_t* __restrict__ ids, const float* __restrict__ h, int64_t I, int64_t D,
            float* __restrict__ y) {
  pdl_wait();
  pdl_launch_dependents();
  constexpr int E = Unit<W>::kElems, L = 32 / G, A = kAheadDown<W>;
  const int lane = threadIdx.x & 31, sub = lane % L;
  const int64_t warp_row0 = (blockIdx.x * static_cast<int64_t>(kWarps) + (threadIdx.x >> 5)) * G;
  if (warp_row0 >= D) return;
  const int64_t p = blockIdx.y, r = warp_row0 + lane / L;
  const bool active = r < D;
  float* yp = y + p * D;
  const int32_t e = ids[p];
  if (!routed_ok(tab.down, tab.E, e)) {
    if (sub == 0 && active) yp[r] = NAN;
    return;
  }
  const DeviceWeight w = tab.down[e];
  const uint64_t units = I / E;
  const bool f16 = w.format == FormatId::F16;
  const float* hr = h + p * I;
  float acc = 0.0f;
  if (active) {
    for (uint64_t q0 = sub; q0 < units; q0 += static_cast<uint64_t>(L) * A) {
      RawUnit<W> rw[A];
#pragma unroll
      for (int i = 0; i < A; ++i) {
        const uint64_t q = q0 + static_cast<uint64_t>(i) * L;
        rw[i] = q < units ? load_unit<W>(w, r, q * E) : RawUnit<W>{};
      }
#pragma unroll
      for (int i = 0; i < A; ++i) {
        const uint64_t q = q0 + static_cast<uint64_t>(i) * L;
        if (q >= units) break;
        float hv[E];
        load_vec<E>(hr + q * E, hv);
        acc = add_partial<W>(rw[i], unit_dot<W>(rw[i], f16, hv), acc);
      }
    }
  }
  const float s = group_sum<L>(acc);
  if (sub == 0 && active) yp[r] = s * row_post_scale<W>(w);
}

// out[t, c] = Σ_j wts[t·k + j] · y[row(t·k + j), c], j ascending from 0 (the CPU backend's order: each
// product rounded, then added). The loads of up to kSlots slots are issued before the first add: a slot's
// row index and value are two dependent loads, and one slot at a time made the decode combine (k = 10, one
// token) a chain of twenty round trips, 5.9 µs (ncu, H200).
constexpr int kSlots = 16;

__global__ void combine_k(float* __restrict__ out, const float* __restrict__ y,
                          const int32_t* __restrict__ pos, const float* __restrict__ wts, int64_t T, int k,
                          int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t n = T * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, c = i % D;
    float o = 0.0f;
    for (int j0 = 0; j0 < k; j0 += kSlots) {
      float v[kSlots], wt[kSlots];
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        if (j0 + j >= k) break;
        const int64_t p = t * k + j0 + j;
        const int64_t row = pos ? pos[p] : p;
        v[j] = row < 0 ? NAN : y[row * D + c];
        wt[j] = wts[p];
      }
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        if (j0 + j >= k) break;
        o = __fadd_rn(o, __fmul_rn(v[j], wt[j]));
      }
    }
    out[i] = o;
  }
}

// Lane groups per warp (1, 2 or 4) that keep the most lanes busy over `units` per row; ties to fewer groups
// (more warps in flight).
int groups_for(uint64_t units) {
  int best = 1;
  double best_eff = 0.0;
  for (int g : {1, 2, 4}) {
    const uint64_t L = 32 / g, passes = (units + L - 1) / L;
    const double eff = passes ? static_cast<double>(units) / static_cast<double>(passes * L) : 0.0;
    if (eff > best_eff + 1e-9) best = g, best_eff = eff;
  }
  return best;
}

// Rows per group: about four weight rows in flight per lane (gate and up count as two).
template <int G>
constexpr int kGateUpRows = G == 1 ? 2 : 1;
template <int G>
constexpr int kDownRows = G == 1 ? 4 : (G == 2 ? 2 : 1);

template <Width W, int G>
void launch_gate_up(const MoeTable& tab, const int32_t* ids, int64_t P, int k, const float* x, int64_t I,
                    float limit, float* h, cudaStream_t s) {
  constexpr int R = kGateUpRows<G>;
  const int64_t per_block = static_cast<int64_t>(kWarps) * G * R;
  const dim3 grid(static_cast<unsigned>((I + per_block - 1) / per_block), static_cast<unsigned>(P));
  pdl_launch(gate_up_k<W, G, R>, grid, kWarps * 32, 0, s, tab, ids, k, x, I, limit, h);
}

template <Width W, int G>
void launch_down(const MoeTable& tab, const int32_t* ids, int64_t P, const float* h, int64_t I, int64_t D,
                 float* y, cudaStream_t s) {
  constexpr int R = kDownRows<G>;
  const int64_t per_block = static_cast<int64_t>(kWarps) * G * R;
  const dim3 grid(static_cast<unsigned>((D + per_block - 1) / per_block), static_cast<unsigned>(P));
  pdl_launch(down_k<W, G, R>, grid, kWarps * 32, 0, s, tab, ids, h, I, D, y);
}

template <Width W, int G>
void launch_gate_up_v2(const MoeTable& tab, const int32_t* ids, int64_t P, int k, const float* x, int64_t I,
                       float limit, float* h, cudaStream_t s) {
  const int64_t per_block = static_cast<int64_t>(kWarps) * G;
  const dim3 grid(static_cast<unsigned>((I + per_block - 1) / per_block), static_cast<unsigned>(P));
  pdl_launch(gate_up_v2<W, G>, grid, kWarps * 32, 0, s, tab, ids, k, x, I, limit, h);
}

template <Width W, int G>
void launch_down_v2(const MoeTable& tab, const int32_t* ids, int64_t P, const float* h, int64_t I, int64_t D,
                    float* y, cudaStream_t s) {
  const int64_t per_block = static_cast<int64_t>(kWarps) * G;
  const dim3 grid(static_cast<unsigned>((D + per_block - 1) / per_block), static_cast<unsigned>(P));
  pdl_launch(down_v2<W, G>, grid, kWarps * 32, 0, s, tab, ids, h, I, D, y);
}

int variant_from_env() {
  const char* v = std::getenv("BLOOMERY_CUDA_MOE_DECODE");
  if (v && std::string(v) == "1") return 1;
  if (v && std::string(v) == "2") return 2;
  return 3;
}

std::atomic<int>& variant_slot() {
  static std::atomic<int> v{variant_from_env()};
  return v;
}

// Calls f.template operator()<W, G>() for the runtime width and group count.
template <class F>
void dispatch(Width w, int g, F&& f) {
  auto by_g = [&]<Width W>() {
    if (g == 4)
      f.template operator()<W, 4>();
    else if (g == 2)
      f.template operator()<W, 2>();
    else
      f.template operator()<W, 1>();
  };
  with_width(w, [&](auto Wc) { by_g.template operator()<decltype(Wc)::value>(); });
}

std::string pairs_shape(int64_t P, int64_t n, int64_t K) {
  return "pairs " + std::to_string(P) + " W[" + std::to_string(n) + ", " + std::to_string(K) + "]";
}

template <Width W>
__global__ void decode_all_k(DeviceWeight w, bool fast, float* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  constexpr int U = Unit<W>::kElems;
  const uint64_t units = w.cols / U, n = blockIdx.x;
  for (uint64_t q = threadIdx.x; q < units; q += blockDim.x) {
    float v[U];
    if (fast) {
      decode_unit<W>(w, n, q * U, v);
    } else {
#pragma unroll
      for (int i = 0; i < U; ++i) v[i] = weight_element(w, n, q * U + i);
    }
#pragma unroll
    for (int i = 0; i < U; ++i) out[n * w.cols + q * U + i] = v[i];
  }
}

}  // namespace

int moe_decode_variant() {
  return variant_slot().load(std::memory_order_relaxed);
}

void set_moe_decode_variant(int v) {
  variant_slot().store(v == 1 || v == 3 ? v : 2, std::memory_order_relaxed);
}

void moe_decode_units(const DeviceWeight& w, bool fast, float* out, cudaStream_t s) {
  if (w.rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(w.rows);
  with_width(width_of(w.format), [&](auto Wc) {
    pdl_launch(decode_all_k<decltype(Wc)::value>, blocks, 128, 0, s, w, fast, out);
  });
  BLOOMERY_CUDA_CHECK_LAUNCH("moe_decode_units " +
                             pairs_shape(1, static_cast<int64_t>(w.rows), static_cast<int64_t>(w.cols)));
}

bool moe_units_ok(FormatId f, uint64_t K, int block_k, const void* data) {
  const Width w = width_of(f);
  const uint64_t U = static_cast<uint64_t>(unit_elems(w));
  if (K == 0 || K % U != 0) return false;
  if (f == FormatId::FP8_BLOCK && block_k % 16 != 0) return false;
  const uintptr_t align = w == Width::Fp4 ? 8 : 16;  // FP4 units are 8 bytes
  return reinterpret_cast<uintptr_t>(data) % align == 0;
}

bool moe_same_width(FormatId a, FormatId b) {
  return width_of(a) == width_of(b);
}

void moe_gate_up(const MoeTable& tab, FormatId gate_fmt, FormatId up_fmt, const int32_t* ids, int64_t P,
                 int k, const float* x, int64_t D, int64_t I, float limit, float* h, cudaStream_t s) {
  if (P == 0 || I == 0) return;
  if (moe_decode_variant() == 3 && moe_tc_fits(gate_fmt, static_cast<uint64_t>(D)) &&
      moe_tc_fits(up_fmt, static_cast<uint64_t>(D))) {
    moe_gate_up_tc(tab, ids, P, k, x, D, I, limit, h, s);
    BLOOMERY_CUDA_CHECK_LAUNCH("moe_gate_up (tensor cores) " + std::string(format_name(gate_fmt)) + " " +
                               pairs_shape(P, I, D));
    return;
  }
  const Width w = width_of(gate_fmt);
  const int g = groups_for(static_cast<uint64_t>(D / unit_elems(w)));
  if (moe_decode_variant() != 1)
    dispatch(w, g, [&]<Width W, int G>() { launch_gate_up_v2<W, G>(tab, ids, P, k, x, I, limit, h, s); });
  else
    dispatch(w, g, [&]<Width W, int G>() { launch_gate_up<W, G>(tab, ids, P, k, x, I, limit, h, s); });
  BLOOMERY_CUDA_CHECK_LAUNCH("moe_gate_up " + std::string(format_name(gate_fmt)) + " " +
                             pairs_shape(P, I, D));
}

void moe_down(const MoeTable& tab, FormatId down_fmt, const int32_t* ids, int64_t P, const float* h,
              int64_t I, int64_t D, float* y, cudaStream_t s) {
  if (P == 0 || D == 0) return;
  if (moe_decode_variant() == 3 && moe_tc_fits(down_fmt, static_cast<uint64_t>(I))) {
    moe_down_tc(tab, ids, P, h, I, D, y, s);
    BLOOMERY_CUDA_CHECK_LAUNCH("moe_down (tensor cores) " + std::string(format_name(down_fmt)) + " " +
                               pairs_shape(P, D, I));
    return;
  }
  const Width w = width_of(down_fmt);
  const int g = groups_for(static_cast<uint64_t>(I / unit_elems(w)));
  if (moe_decode_variant() != 1)
    dispatch(w, g, [&]<Width W, int G>() { launch_down_v2<W, G>(tab, ids, P, h, I, D, y, s); });
  else
    dispatch(w, g, [&]<Width W, int G>() { launch_down<W, G>(tab, ids, P, h, I, D, y, s); });
  BLOOMERY_CUDA_CHECK_LAUNCH("moe_down " + std::string(format_name(down_fmt)) + " " + pairs_shape(P, D, I));
}

void moe_combine(float* out, const float* y, const int32_t* pos, const float* wts, int64_t T, int k,
                 int64_t D, cudaStream_t s) {
  const int64_t n = T * D;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 4096);
  pdl_launch(combine_k, static_cast<unsigned>(blocks), kThreads, 0, s, out, y, pos, wts, T, k, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("moe_combine [" + std::to_string(T) + ", " + std::to_string(k) + ", " +
                             std::to_string(D) + "]");
}

}  // namespace bloomery::cuda
