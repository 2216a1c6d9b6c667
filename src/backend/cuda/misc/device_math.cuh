// Device activation functions and block reductions shared by the small-op kernels (f32, as torch computes).
#pragma once

#include <cstdint>

namespace bloomery::cuda {

__device__ __forceinline__ float act_apply(int act, float x) {
  switch (act) {
    case 1:  // Silu
      return x / (1.0f + expf(-x));
    case 2:  // Sigmoid
      return 1.0f / (1.0f + expf(-x));
    case 3:  // Softplus (torch: threshold 20, beta 1)
      return x > 20.0f ? x : log1pf(expf(x));
    case 4:  // Relu
      return x > 0.0f ? x : 0.0f;
    default:
      return x;
  }
}

// A product's epilogue (kernels.h Epilogue): post · act(pre · v), each product rounded on its own.
__device__ __forceinline__ float epilogue_apply(float pre, int act, float post, float v) {
  return __fmul_rn(act_apply(act, __fmul_rn(v, pre)), post);
}

__device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result. `red` holds 33
// floats of shared memory.
__device__ __forceinline__ float block_reduce_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_reduce_sum(v);
  __syncthreads();
  if (lane == 0) red[wid] = v;
  __syncthreads();
  if (wid == 0) {
    float s = lane < nw ? red[lane] : 0.0f;
    s = warp_reduce_sum(s);
    if (lane == 0) red[32] = s;
  }
  __syncthreads();
  return red[32];
}

__device__ __forceinline__ float block_reduce_max(float v, float* red) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_reduce_max(v);
  __syncthreads();
  if (lane == 0) red[wid] = v;
  __syncthreads();
  if (wid == 0) {
    float s = lane < nw ? red[lane] : -INFINITY;
    s = warp_reduce_max(s);
    if (lane == 0) red[32] = s;
  }
  __syncthreads();
  return red[32];
}

inline unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 1048576 ? 1048576 : b));
}

}  // namespace bloomery::cuda
