// Decode GEMV on stored-format weights: y[t, r] = Σ_k x[t, k] · W[row0 + r, k] for 1 ≤ T ≤ 8 rows of x. A
// warp owns 4 weight rows; each lane reads units of stored elements (16 bytes; 8 for FP4), decodes them in
// registers (bit-exact with the CPU decoders) and multiplies them into all T rows, so the weight is read
// once for every row of x.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
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
  switch (width_of(w.format)) {
    case Width::F32:
      gemv_units<Width::F32, R><<<blocks, kWarps * 32, 0, s>>>(w, row0, n, x, T, y);
      break;
    case Width::Half:
      gemv_units<Width::Half, R><<<blocks, kWarps * 32, 0, s>>>(w, row0, n, x, T, y);
      break;
    case Width::Fp8:
      gemv_units<Width::Fp8, R><<<blocks, kWarps * 32, 0, s>>>(w, row0, n, x, T, y);
      break;
    case Width::Fp4:
      gemv_units<Width::Fp4, R><<<blocks, kWarps * 32, 0, s>>>(w, row0, n, x, T, y);
      break;
  }
}

}  // namespace

// True when rows can be read in 16-byte units: K a multiple of the unit (row starts stay aligned) and, for
// FP8 blocks, tiles whose width is a multiple of 16 (one scale per unit).
bool unit_path(const DeviceWeight& w) {
  const Width W = width_of(w.format);
  const uint64_t E = W == Width::F32 ? 4 : (W == Width::Half ? 8 : 16);
  if (w.cols % E != 0) return false;
  if (w.format == FormatId::FP8_BLOCK && w.block_k % 16 != 0) return false;
  return true;
}

void gemv(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y, cudaStream_t s) {
  if (n == 0 || T == 0) return;
  const bool x_aligned = (reinterpret_cast<uintptr_t>(x) % 16) == 0;
  if (!unit_path(w) || !x_aligned) {
    const unsigned blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
    gemv_elements<<<blocks, kWarps * 32, 0, s>>>(w, row0, n, x, T, y);
  } else {
    if (T <= 2)
      launch_units<1>(w, row0, n, x, T, y, s);
    else
      launch_units<4>(w, row0, n, x, T, y, s);
  }
  BLOOMERY_CUDA_CHECK_LAUNCH("gemv " + std::string(format_name(w.format)) + " W[" + std::to_string(w.rows) +
                             ", " + std::to_string(w.cols) + "] rows " + std::to_string(row0) + "+" +
                             std::to_string(n) + " x[" + std::to_string(T) + "]");
}

}  // namespace bloomery::cuda
