// glm5_next KDA (models.md §4.6): the forget gate, and the delta rule with a per-channel decay in its step
// form. The step kernel is the GDN step kernel's layout (linear_attn/gated_delta.cu): one block per (head,
// slice of 32 value columns), 32 × 8 threads, thread (ty, tx) owns column b0 + tx and rows ty, ty + 8, … of
// S[h] in registers, so the state is read and written once per call. What differs from GDN: the decay is a
// vector over the key channels (row a of S decays by exp(g[a])), and q, k are always L2-normalised.
// Prompts (kda_rule chunked) run this same token recurrence for now: exact to f32 rounding, not the chunked
// algorithm's speed.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/glm_kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kCols = 32;
constexpr int kRowGroups = 8;
constexpr int kThreads = kCols * kRowGroups;
constexpr int kRows = kKdaMaxDk / kRowGroups;  // state rows per thread at most

__global__ void kda_gate_k(float* g, const float* f, const float* dt_bias, const float* A_log, int64_t T,
                           int64_t H, int64_t dk, bool has_lower, float lower) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t n = T * H * dk;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t hd = i % (H * dk), h = hd / dk;
    const float rate = expf(A_log[h]);
    const float x = f[i] + dt_bias[hd];
    if (has_lower) {
      g[i] = lower * (1.0f / (1.0f + expf(-(rate * x))));
    } else {
      const float sp = x > 20.0f ? x : logf(1.0f + expf(x));
      g[i] = -rate * sp;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    kda_step_k(float* __restrict__ out, const float* __restrict__ q, const float* __restrict__ k,
               const float* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
               float* __restrict__ state, int64_t T, int64_t H, int dk, int dv) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float qs[kKdaMaxDk], ks[kKdaMaxDk], ds[kKdaMaxDk];
  __shared__ float red_mem[kRowGroups][kCols], red_out[kRowGroups][kCols];
  __shared__ float red_norm[kThreads / 32][2];
  const int tx = threadIdx.x % kCols, ty = threadIdx.x / kCols, tid = threadIdx.x;
  const int64_t h = blockIdx.y;
  const int b = blockIdx.x * kCols + tx;
  const bool col = b < dv;
  float* S = state + h * static_cast<int64_t>(dk) * dv;

  float s[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int a = ty + r * kRowGroups;
    s[r] = (col && a < dk) ? S[static_cast<int64_t>(a) * dv + b] : 0.0f;
  }
  const float qscale = 1.0f / sqrtf(static_cast<float>(dk));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = t * H + h;
    float qv = 0.0f, kv = 0.0f, gv = 0.0f;
    if (tid < dk) {
      qv = q[row * dk + tid];
      kv = k[row * dk + tid];
      gv = g[row * dk + tid];
    }
    const float vv = col ? v[row * dv + b] : 0.0f;
    const float bt = beta[row];
    float sq = warp_reduce_sum(qv * qv), sk = warp_reduce_sum(kv * kv);
    if ((tid & 31) == 0) red_norm[tid / 32][0] = sq, red_norm[tid / 32][1] = sk;
    __syncthreads();
    sq = 0.0f, sk = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) sq += red_norm[w][0], sk += red_norm[w][1];
    if (tid < dk) {
      qs[tid] = qv / sqrtf(sq + 1e-6f) * qscale;
      ks[tid] = kv / sqrtf(sk + 1e-6f);
      ds[tid] = expf(gv);
    }
    __syncthreads();
    // S ← diag(e^g) S; mem = Sᵀk (partial over this thread's rows)
    float mem = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int a = ty + r * kRowGroups;
      if (a < dk) {
        s[r] *= ds[a];
        mem = fmaf(s[r], ks[a], mem);
      }
    }
    red_mem[ty][tx] = mem;
    __syncthreads();
    mem = 0.0f;
#pragma unroll
    for (int y = 0; y < kRowGroups; ++y) mem += red_mem[y][tx];
    // u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀq
    const float delta = (vv - mem) * bt;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int a = ty + r * kRowGroups;
      if (a < dk) {
        s[r] = fmaf(ks[a], delta, s[r]);
        o = fmaf(s[r], qs[a], o);
      }
    }
    red_out[ty][tx] = o;
    __syncthreads();  // also: every thread is done with qs/ks/ds, red_norm and red_mem of this token
    if (ty == 0 && col) {
      o = 0.0f;
#pragma unroll
      for (int y = 0; y < kRowGroups; ++y) o += red_out[y][tx];
      out[row * dv + b] = o;
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int a = ty + r * kRowGroups;
    if (col && a < dk) S[static_cast<int64_t>(a) * dv + b] = s[r];
  }
}

}  // namespace

void kda_gate(float* g, const float* f, const float* dt_bias, const float* A_log, int64_t T, int64_t H,
              int64_t dk, bool has_lower, float lower, cudaStream_t s) {
  const int64_t n = T * H * dk;
  if (n == 0) return;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65535 * 16) blocks = 65535 * 16;
  pdl_launch(kda_gate_k, static_cast<unsigned>(blocks), 256, 0, s, g, f, dt_bias, A_log, T, H, dk, has_lower,
             lower);
  BLOOMERY_CUDA_CHECK_LAUNCH("kda_gate f [" + std::to_string(T) + ", " + std::to_string(H) + "·" +
                             std::to_string(dk) + "]");
}

void kda_rule_steps(float* out, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, float* state, int64_t T, int64_t H, int64_t dk, int64_t dv,
                    cudaStream_t s) {
  if (H == 0 || dv == 0 || T == 0) return;
  const std::string what = "kda_rule q [" + std::to_string(T) + ", " + std::to_string(H) + ", " +
                           std::to_string(dk) + "] dv " + std::to_string(dv);
  if (dk < 1 || dk > kKdaMaxDk || dv > kKdaMaxDk)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": needs dk, dv <= 128");
  const dim3 grid(static_cast<unsigned>((dv + kCols - 1) / kCols), static_cast<unsigned>(H));
  pdl_launch(kda_step_k, grid, kThreads, 0, s, out, q, k, v, g, beta, state, T, H, static_cast<int>(dk),
             static_cast<int>(dv));
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

}  // namespace bloomery::cuda
