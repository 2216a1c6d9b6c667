// Causal depthwise conv1d over time with carried state (one thread per channel and run of 8 tokens, then the
// state update), and the GDN gates g = −exp(A_log)·softplus(a + dt_bias), β = σ(b).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_attn/gdn_gates.cuh"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

// One thread per (channel c, run of kConvRun consecutive tokens): reads only (state, x), so a whole prompt
// runs in one launch with no index division; a warp covers 32 consecutive channels (coalesced), and the K
// taps of neighbouring tokens are the same few inputs (cache hits).
constexpr int kConvRun = 8;
__global__ void conv1d_k(float* __restrict__ out, const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ state, int64_t T, int64_t C, int64_t K, int dil, int act) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t P = (K - 1) * dil;
  const float* S = state + c * P;
  const float* wc = w + c * K;
  for (int64_t t0 = blockIdx.y * static_cast<int64_t>(kConvRun); t0 < T;
       t0 += static_cast<int64_t>(gridDim.y) * kConvRun) {  // grid-stride over runs (gridDim.y is capped)
    const int64_t t1 = t0 + kConvRun < T ? t0 + kConvRun : T;
    for (int64_t t = t0; t < t1; ++t) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) {
        // ext[e] = state[e] for e < P, x[e − P] after: the previous inputs followed by this call's.
        const int64_t e = P + t - (K - 1 - j) * dil;
        acc += wc[j] * (e < P ? S[e] : x[(e - P) * C + c]);
      }
      out[t * C + c] = act_apply(act, acc);
    }
  }
}

// New state: the last P inputs, after conv1d_k (stream order) has read the old state. Reads index T + e > e,
// so the in-place walk never reads a slot it already wrote.
__global__ void conv1d_state_k(const float* __restrict__ x, float* __restrict__ state, int64_t T, int64_t C,
                               int64_t P) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float* S = state + c * P;
  for (int64_t e = 0; e < P; ++e) S[e] = T + e < P ? S[T + e] : x[(T + e - P) * C + c];
}

// A decode call (one run of tokens, a short state): the conv and the state update in one launch, each thread
// keeping its channel's old state while it writes the new one (conv1d_k's sums, so the same bits).
constexpr int kStepMaxP = 16;
__global__ void conv1d_step_k(float* __restrict__ out, const float* __restrict__ x,
                              const float* __restrict__ w, float* __restrict__ state, int64_t T, int64_t C,
                              int64_t K, int dil, int act) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t P = (K - 1) * dil;
  float* S = state + c * P;
  const float* wc = w + c * K;
  float old[kStepMaxP];
  for (int64_t e = 0; e < P; ++e) old[e] = S[e];
  for (int64_t t = 0; t < T; ++t) {
    float acc = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = P + t - (K - 1 - j) * dil;
      acc += wc[j] * (e < P ? old[e] : x[(e - P) * C + c]);
    }
    out[t * C + c] = act_apply(act, acc);
  }
  for (int64_t e = 0; e < P; ++e) S[e] = T + e < P ? old[T + e] : x[(T + e - P) * C + c];
}

__global__ void gdn_gates_k(float* g, float* beta, const float* a, const float* b, const float* A_log,
                            const float* dt_bias, int64_t T, int64_t Hv) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < T * Hv;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = i % Hv;
    g[i] = gdn_log_decay(A_log[h], dt_bias[h], a[i]);
    beta[i] = gdn_beta(b[i]);
  }
}

}  // namespace

void causal_conv1d(float* out, const float* x, const float* w, float* state, int64_t T, int64_t C, int64_t K,
                   int dilation, int act, cudaStream_t s) {
  if (C == 0 || T == 0) return;
  const std::string what =
      "causal_conv1d x[" + std::to_string(T) + ", " + std::to_string(C) + "] K " + std::to_string(K);
  const int64_t runs = (T + kConvRun - 1) / kConvRun;
  const int64_t P = (K - 1) * dilation;
  if (runs == 1 && P > 0 && P <= kStepMaxP) {
    pdl_launch(conv1d_step_k, grid_for(C, 128), 128, 0, s, out, x, w, state, T, C, K, dilation, act);
    BLOOMERY_CUDA_CHECK_LAUNCH(what + " step");
    return;
  }
  const dim3 grid(grid_for(C, 128), static_cast<unsigned>(runs < 65535 ? runs : 65535));
  pdl_launch(conv1d_k, grid, 128, 0, s, out, x, w, state, T, C, K, dilation, act);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
  if (P == 0) return;
  pdl_launch(conv1d_state_k, grid_for(C, 128), 128, 0, s, x, state, T, C, P);
  BLOOMERY_CUDA_CHECK_LAUNCH(what + " state");
}

void gdn_gates(float* g, float* beta, const float* a, const float* b, const float* A_log,
               const float* dt_bias, int64_t T, int64_t Hv, cudaStream_t s) {
  if (T * Hv == 0) return;
  pdl_launch(gdn_gates_k, grid_for(T * Hv, 256), 256, 0, s, g, beta, a, b, A_log, dt_bias, T, Hv);
  BLOOMERY_CUDA_CHECK_LAUNCH("gdn_gates [" + std::to_string(T) + ", " + std::to_string(Hv) + "]");
}

}  // namespace bloomery::cuda
