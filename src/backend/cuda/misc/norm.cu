// RMSNorm (plain, 1+w, unweighted; per group, shared or per-group weights), gated RMSNorm and LayerNorm:
// one block per normalised group, f32 sums.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/norm_group.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_k(float* out, const float* x, const float* w, float eps, int kind, int64_t group,
                           int64_t groups_per_row, bool w_per_group) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float red[33];
  const int64_t g = blockIdx.x;
  const float* xg = x + g * group;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) ss += xg[i] * xg[i];
  ss = block_reduce_sum(ss, red);
  const float s = 1.0f / sqrtf(ss / static_cast<float>(group) + eps);
  const float* wg = w ? (w_per_group ? w + (g % groups_per_row) * group : w) : nullptr;
  float* yg = out + g * group;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    const float v = xg[i] * s;
    yg[i] = kind == 0 ? wg[i] * v : (kind == 1 ? v * (1.0f + wg[i]) : v);
  }
}

__global__ void rms_norm_gated_k(float* out, const float* x, const float* z, const float* w, float eps,
                                 int act, int64_t group) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float red[33];
  const int64_t at = blockIdx.x * group;
  rms_norm_gated_group(out + at, x + at, z + at, w, eps, act, group, static_cast<int>(blockDim.x), red);
}

__global__ void layer_norm_k(float* out, const float* x, const float* w, const float* b, float eps,
                             int64_t C) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float red[33];
  const float* xr = x + blockIdx.x * C;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) sum += xr[i];
  const float mean = block_reduce_sum(sum, red) / static_cast<float>(C);
  float var = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) var += (xr[i] - mean) * (xr[i] - mean);
  var = block_reduce_sum(var, red) / static_cast<float>(C);
  const float s = 1.0f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    out[blockIdx.x * C + i] = (xr[i] - mean) * s * w[i] + b[i];
}

}  // namespace

// A decode step normalises few groups (T × streams), so a group's block is the whole kernel: groups of 1,024
// or more take 1,024 threads (a few values each) instead of walking 2,560 values ten deep (latency-bound).
int rms_norm_threads(int64_t group) {
  if (group >= 4 * kThreads) return 1024;
  return group >= kThreads ? kThreads : (group >= 128 ? 128 : (group > 32 ? 64 : 32));
}

void rms_norm(float* out, const float* x, const float* w, float eps, int kind, int64_t groups, int64_t group,
              int64_t groups_per_row, bool w_per_group, cudaStream_t s) {
  if (groups == 0) return;
  pdl_launch(rms_norm_k, static_cast<unsigned>(groups), rms_norm_threads(group), 0, s, out, x, w, eps, kind,
             group, groups_per_row, w_per_group);
  BLOOMERY_CUDA_CHECK_LAUNCH("rms_norm groups " + std::to_string(groups) + " × " + std::to_string(group));
}

void rms_norm_gated(float* out, const float* x, const float* z, const float* w, float eps, int act,
                    int64_t groups, int64_t group, cudaStream_t s) {
  if (groups == 0) return;
  pdl_launch(rms_norm_gated_k, static_cast<unsigned>(groups), rms_norm_threads(group), 0, s, out, x, z, w,
             eps, act, group);
  BLOOMERY_CUDA_CHECK_LAUNCH("rms_norm_gated groups " + std::to_string(groups) + " × " +
                             std::to_string(group));
}

void layer_norm(float* out, const float* x, const float* w, const float* b, float eps, int64_t R, int64_t C,
                cudaStream_t s) {
  if (R == 0) return;
  pdl_launch(layer_norm_k, static_cast<unsigned>(R), rms_norm_threads(C), 0, s, out, x, w, b, eps, C);
  BLOOMERY_CUDA_CHECK_LAUNCH("layer_norm [" + std::to_string(R) + ", " + std::to_string(C) + "]");
}

}  // namespace bloomery::cuda
