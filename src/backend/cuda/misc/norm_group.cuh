// Gated RMSNorm of one group, shared by rms_norm_gated_k (norm.cu) and the GDN decode mixer in one pass
// (gated_delta.cu), so both sum in the same order: y = w · x · rms(x)⁻¹ · act(z) over `group` values.
#pragma once

#include <cstdint>

#include "backend/cuda/misc/device_math.cuh"

namespace bloomery::cuda {

// Threads 0..nthreads−1 of the block (nthreads a multiple of 32, at most the block) take the values
// i ≡ thread (mod nthreads) in order, then block_reduce_sum's warp and cross-warp sums over those threads.
// Every thread of the block calls it (barriers); `red` holds 33 floats of shared memory. x may be shared
// memory; out and z are the group's own.
__device__ __forceinline__ void rms_norm_gated_group(float* out, const float* x, const float* z,
                                                     const float* w, float eps, int act, int64_t group,
                                                     int nthreads, float* red) {
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  float ss = 0.0f;
  if (tid < nthreads)
    for (int64_t i = tid; i < group; i += nthreads) ss += x[i] * x[i];
  ss = warp_reduce_sum(ss);
  __syncthreads();
  if (lane == 0 && tid < nthreads) red[wid] = ss;
  __syncthreads();
  if (wid == 0) {
    float r = lane < nthreads / 32 ? red[lane] : 0.0f;
    r = warp_reduce_sum(r);
    if (lane == 0) red[32] = r;
  }
  __syncthreads();
  const float s = 1.0f / sqrtf(red[32] / static_cast<float>(group) + eps);
  if (tid < nthreads)
    for (int64_t i = tid; i < group; i += nthreads) out[i] = (w[i] * (x[i] * s)) * act_apply(act, z[i]);
}

}  // namespace bloomery::cuda
