// Causal depthwise conv1d over time with carried state (one thread per channel walks the T tokens), and the
// GDN gates g = −exp(A_log)·softplus(a + dt_bias), β = σ(b).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"

namespace bloomery::cuda {
namespace {

__global__ void conv1d_k(float* out, const float* x, const float* w, float* state, int64_t T, int64_t C,
                         int64_t K, int dil, int act) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t P = (K - 1) * dil;
  float* S = state + c * P;
  const float* wc = w + c * K;
  // ext[i] = state[i] for i < P, x[i − P] after: the previous inputs followed by this call's.
  auto ext = [&](int64_t i) { return i < P ? S[i] : x[(i - P) * C + c]; };
  for (int64_t t = 0; t < T; ++t) {
    float acc = 0.0f;
    for (int64_t j = 0; j < K; ++j) acc += wc[j] * ext(P + t - (K - 1 - j) * dil);
    out[t * C + c] = act_apply(act, acc);
  }
  // New state: the last P inputs. Reads index T + i > i, so the in-place walk never reads a written slot.
  for (int64_t i = 0; i < P; ++i) S[i] = ext(T + i);
}

__global__ void gdn_gates_k(float* g, float* beta, const float* a, const float* b, const float* A_log,
                            const float* dt_bias, int64_t T, int64_t Hv) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= T * Hv) return;
  const int64_t h = i % Hv;
  g[i] = -expf(A_log[h]) * act_apply(kActSoftplus, a[i] + dt_bias[h]);
  beta[i] = act_apply(kActSigmoid, b[i]);
}

}  // namespace

void causal_conv1d(float* out, const float* x, const float* w, float* state, int64_t T, int64_t C, int64_t K,
                   int dilation, int act, cudaStream_t s) {
  if (C == 0) return;
  conv1d_k<<<grid_for(C, 128), 128, 0, s>>>(out, x, w, state, T, C, K, dilation, act);
  BLOOMERY_CUDA_CHECK_LAUNCH("causal_conv1d x[" + std::to_string(T) + ", " + std::to_string(C) + "] K " +
                             std::to_string(K));
}

void gdn_gates(float* g, float* beta, const float* a, const float* b, const float* A_log,
               const float* dt_bias, int64_t T, int64_t Hv, cudaStream_t s) {
  if (T * Hv == 0) return;
  gdn_gates_k<<<grid_for(T * Hv, 256), 256, 0, s>>>(g, beta, a, b, A_log, dt_bias, T, Hv);
  BLOOMERY_CUDA_CHECK_LAUNCH("gdn_gates [" + std::to_string(T) + ", " + std::to_string(Hv) + "]");
}

}  // namespace bloomery::cuda
