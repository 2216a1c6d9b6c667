// Gated delta rule (GDN), step form: the token-by-token recurrence of models.md §1.6 with the f32 state held
// in registers. Serves decode (T = 1, memory-bound on the state) and `chunked == false` prompts.
//
// Layout: one block per (value head h, slice of kStepCols value columns); 32 × kStepRowGroups threads. Thread
// (ty, tx) owns column b = b0 + tx and rows a = ty, ty + kStepRowGroups, … of S[h] (dk × dv, row-major), so a
// warp reads and writes 32 consecutive floats of one state row: the state is read once and written once,
// coalesced, and dv is split across blocks (48 heads × 4 slices = 192 blocks of 256 threads at dk = dv = 128)
// so every SM has loads in flight. Sums over a (Sᵀk, Sᵀq) are per-thread partials, then a fixed-order sum
// over the row groups in shared memory. Any dk ≤ 128 and any dv work (columns past dv are masked).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kStepCols = 32;
constexpr int kStepRowGroups = 8;
constexpr int kStepThreads = kStepCols * kStepRowGroups;
constexpr int kStepRows = kGdnMaxDk / kStepRowGroups;  // state rows per thread at most

// The token's per-thread inputs, loaded one token ahead so their latency overlaps the previous token's math.
struct StepIn {
  float q, k, v, g, beta;
};

__device__ __forceinline__ StepIn load_step(const float* q, const float* k, const float* v, const float* g,
                                            const float* beta, int64_t t, int64_t Hk, int64_t Hv, int64_t h,
                                            int64_t kh, int dk, int dv, int b, int tid) {
  StepIn in{0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  if (tid < dk) {
    in.q = q[(t * Hk + kh) * dk + tid];
    in.k = k[(t * Hk + kh) * dk + tid];
  }
  if (b < dv) in.v = v[(t * Hv + h) * dv + b];
  in.g = g[t * Hv + h];
  in.beta = beta[t * Hv + h];
  return in;
}

__global__ void __launch_bounds__(kStepThreads)
    gdn_step_k(float* __restrict__ out, const float* __restrict__ q, const float* __restrict__ k,
               const float* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
               float* __restrict__ state, int64_t T, int64_t Hk, int64_t Hv, int dk, int dv, bool l2) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float qs[kGdnMaxDk], ks[kGdnMaxDk];
  __shared__ float red_mem[kStepRowGroups][kStepCols], red_out[kStepRowGroups][kStepCols];
  __shared__ float red_norm[kStepThreads / 32][2];
  const int tx = threadIdx.x % kStepCols, ty = threadIdx.x / kStepCols, tid = threadIdx.x;
  const int64_t h = blockIdx.y, kh = h / (Hv / Hk);
  const int b = blockIdx.x * kStepCols + tx;
  const bool col = b < dv;
  float* S = state + h * static_cast<int64_t>(dk) * dv;

  float s[kStepRows];
#pragma unroll
  for (int r = 0; r < kStepRows; ++r) {
    const int a = ty + r * kStepRowGroups;
    s[r] = (col && a < dk) ? S[static_cast<int64_t>(a) * dv + b] : 0.0f;
  }
  const float qscale = 1.0f / sqrtf(static_cast<float>(dk));
  StepIn cur = load_step(q, k, v, g, beta, 0, Hk, Hv, h, kh, dk, dv, b, tid);
  for (int64_t t = 0; t < T; ++t) {
    const StepIn nxt = t + 1 < T ? load_step(q, k, v, g, beta, t + 1, Hk, Hv, h, kh, dk, dv, b, tid) : cur;
    float qn = 1.0f, kn = 1.0f;
    if (l2) {  // Σq², Σk² over the dk entries held by threads 0..dk−1
      float sq = warp_reduce_sum(cur.q * cur.q), sk = warp_reduce_sum(cur.k * cur.k);
      if ((tid & 31) == 0) red_norm[tid / 32][0] = sq, red_norm[tid / 32][1] = sk;
      __syncthreads();
      sq = 0.0f, sk = 0.0f;
#pragma unroll
      for (int w = 0; w < kStepThreads / 32; ++w) sq += red_norm[w][0], sk += red_norm[w][1];
      qn = 1.0f / sqrtf(sq + 1e-6f);
      kn = 1.0f / sqrtf(sk + 1e-6f);
    }
    if (tid < dk) qs[tid] = (cur.q * qn) * qscale, ks[tid] = cur.k * kn;
    __syncthreads();
    // S ← e^g S; mem = Sᵀk (partial over this thread's rows)
    const float decay = expf(cur.g);
    float mem = 0.0f;
#pragma unroll
    for (int r = 0; r < kStepRows; ++r) {
      const int a = ty + r * kStepRowGroups;
      if (a < dk) {
        s[r] *= decay;
        mem = fmaf(s[r], ks[a], mem);
      }
    }
    red_mem[ty][tx] = mem;
    __syncthreads();
    mem = 0.0f;
#pragma unroll
    for (int y = 0; y < kStepRowGroups; ++y) mem += red_mem[y][tx];
    // u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀq
    const float delta = (cur.v - mem) * cur.beta;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kStepRows; ++r) {
      const int a = ty + r * kStepRowGroups;
      if (a < dk) {
        s[r] = fmaf(ks[a], delta, s[r]);
        o = fmaf(s[r], qs[a], o);
      }
    }
    red_out[ty][tx] = o;
    __syncthreads();  // also: every thread is done with qs/ks, red_norm and red_mem of this token
    if (ty == 0 && col) {
      o = 0.0f;
#pragma unroll
      for (int y = 0; y < kStepRowGroups; ++y) o += red_out[y][tx];
      out[(t * Hv + h) * dv + b] = o;
    }
    cur = nxt;
  }
#pragma unroll
  for (int r = 0; r < kStepRows; ++r) {
    const int a = ty + r * kStepRowGroups;
    if (col && a < dk) S[static_cast<int64_t>(a) * dv + b] = s[r];
  }
}

}  // namespace

void gated_delta_rule(float* out, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, int64_t T, int64_t Hk, int64_t Hv, int64_t dk,
                      int64_t dv, bool l2norm_qk, cudaStream_t s) {
  if (Hv == 0 || dv == 0 || T == 0) return;
  const std::string what = "gated_delta_rule (step) q[" + std::to_string(T) + ", " + std::to_string(Hk) +
                           ", " + std::to_string(dk) + "] v[" + std::to_string(Hv) + ", " +
                           std::to_string(dv) + "]";
  if (dk < 1 || dk > kGdnMaxDk || dv > kGdnMaxDv || Hk < 1 || Hv % Hk != 0)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": needs dk, dv <= 128 and Hv a multiple of Hk");
  const dim3 grid(static_cast<unsigned>((dv + kStepCols - 1) / kStepCols), static_cast<unsigned>(Hv));
  pdl_launch(gdn_step_k, grid, kStepThreads, 0, s, out, q, k, v, g, beta, state, T, Hk, Hv,
             static_cast<int>(dk), static_cast<int>(dv), l2norm_qk);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

}  // namespace bloomery::cuda
