// The GDN gates of one (token, value head), shared by gdn_gates_k (conv1d.cu) and the one-pass decode mixer
// (gated_delta.cu) so both round them the same way: g = −exp(A_log)·softplus(a + dt_bias), β = σ(b).
#pragma once

#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"

namespace bloomery::cuda {

__device__ __forceinline__ float gdn_log_decay(float A_log, float dt_bias, float a) {
  return -expf(A_log) * act_apply(kActSoftplus, a + dt_bias);
}

__device__ __forceinline__ float gdn_beta(float b) {
  return act_apply(kActSigmoid, b);
}

}  // namespace bloomery::cuda
