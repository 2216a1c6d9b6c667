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
#include "backend/cuda/linear_attn/gdn_gates.cuh"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/norm_group.cuh"
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

// Rows of q, k are qrow floats apart, rows of v vrow (the separate tensors' widths, or the conv output's).
__device__ __forceinline__ StepIn load_qkv(const float* q, const float* k, const float* v, int64_t t,
                                           int64_t qrow, int64_t vrow, int64_t h, int64_t kh, int dk, int dv,
                                           int b, int tid) {
  StepIn in{0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  if (tid < dk) {
    in.q = q[t * qrow + kh * dk + tid];
    in.k = k[t * qrow + kh * dk + tid];
  }
  if (b < dv) in.v = v[t * vrow + h * dv + b];
  return in;
}

// The state slice of thread (ty, column b): rows ty, ty + kStepRowGroups, … of S (dk × dv, row-major).
__device__ __forceinline__ void load_state(float (&s)[kStepRows], const float* S, int dk, int dv, int b,
                                           bool col, int ty) {
#pragma unroll
  for (int r = 0; r < kStepRows; ++r) {
    const int a = ty + r * kStepRowGroups;
    s[r] = (col && a < dk) ? S[static_cast<int64_t>(a) * dv + b] : 0.0f;
  }
}
__device__ __forceinline__ void store_state(const float (&s)[kStepRows], float* S, int dk, int dv, int b,
                                            bool col, int ty) {
#pragma unroll
  for (int r = 0; r < kStepRows; ++r) {
    const int a = ty + r * kStepRowGroups;
    if (col && a < dk) S[static_cast<int64_t>(a) * dv + b] = s[r];
  }
}

// One token of the recurrence for thread (ty, tx) of a block ncols columns wide (column b = its state
// column): q (L2-normalised if l2, scaled by dk^−0.5) and k (L2-normalised if l2) staged in qs/ks; S ← e^g S;
// mem = Sᵀk; u = β (v − mem); S ← S + k uᵀ. Returns the column's o = Sᵀq, summed over the row groups in a
// fixed order (valid in threads with ty == 0). The norms' partials come from the first nw_norm warps (those
// holding q and k). Ends with a barrier: the shared arrays are free for the next token.
__device__ __forceinline__ float step_token(float (&s)[kStepRows], const StepIn& cur, bool l2, int dk,
                                            float qscale, int tid, int tx, int ty, int ncols, int nw_norm,
                                            float* qs, float* ks, float (*red_norm)[2], float* red_mem,
                                            float* red_out) {
  float qn = 1.0f, kn = 1.0f;
  if (l2) {  // Σq², Σk² over the dk entries held by threads 0..dk−1
    float sq = warp_reduce_sum(cur.q * cur.q), sk = warp_reduce_sum(cur.k * cur.k);
    if ((tid & 31) == 0 && tid / 32 < nw_norm) red_norm[tid / 32][0] = sq, red_norm[tid / 32][1] = sk;
    __syncthreads();
    sq = 0.0f, sk = 0.0f;
    for (int w = 0; w < nw_norm; ++w) sq += red_norm[w][0], sk += red_norm[w][1];
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
  red_mem[ty * ncols + tx] = mem;
  __syncthreads();
  mem = 0.0f;
#pragma unroll
  for (int y = 0; y < kStepRowGroups; ++y) mem += red_mem[y * ncols + tx];
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
  red_out[ty * ncols + tx] = o;
  __syncthreads();  // also: every thread is done with qs/ks, red_norm and red_mem of this token
  o = 0.0f;
  if (ty == 0) {
#pragma unroll
    for (int y = 0; y < kStepRowGroups; ++y) o += red_out[y * ncols + tx];
  }
  return o;
}

__global__ void __launch_bounds__(kStepThreads)
    gdn_step_k(float* __restrict__ out, const float* __restrict__ q, const float* __restrict__ k,
               const float* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
               float* __restrict__ state, int64_t T, int64_t Hk, int64_t Hv, int dk, int dv, bool l2) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float qs[kGdnMaxDk], ks[kGdnMaxDk];
  __shared__ float red_mem[kStepRowGroups * kStepCols], red_out[kStepRowGroups * kStepCols];
  __shared__ float red_norm[kStepThreads / 32][2];
  const int tx = threadIdx.x % kStepCols, ty = threadIdx.x / kStepCols, tid = threadIdx.x;
  const int64_t h = blockIdx.y, kh = h / (Hv / Hk);
  const int b = blockIdx.x * kStepCols + tx;
  const bool col = b < dv;
  float* S = state + h * static_cast<int64_t>(dk) * dv;
  float s[kStepRows];
  load_state(s, S, dk, dv, b, col, ty);
  const float qscale = 1.0f / sqrtf(static_cast<float>(dk));
  auto load = [&](int64_t t) {
    StepIn in = load_qkv(q, k, v, t, Hk * dk, Hv * dv, h, kh, dk, dv, b, tid);
    in.g = g[t * Hv + h];
    in.beta = beta[t * Hv + h];
    return in;
  };
  StepIn cur = load(0);
  for (int64_t t = 0; t < T; ++t) {
    const StepIn nxt = t + 1 < T ? load(t + 1) : cur;
    const float o = step_token(s, cur, l2, dk, qscale, tid, tx, ty, kStepCols, kStepThreads / 32, qs, ks,
                               red_norm, red_mem, red_out);
    if (ty == 0 && col) out[(t * Hv + h) * dv + b] = o;
    cur = nxt;
  }
  store_state(s, S, dk, dv, b, col, ty);
}

// gdn_step_gated: a block per value head, its dv columns (rounded up to warps) × kStepRowGroups threads. The
// gates are gdn_gates_k's (gdn_gates.cuh), the recurrence step_token's, and the gated norm rms_norm_gated_k's
// (norm_group.cuh, over rms_norm_threads(dv) threads as that kernel's block), so the bits equal the separate
// kernels'.
constexpr int kGatedThreads = kGdnMaxDv * kStepRowGroups;
__global__ void __launch_bounds__(kGatedThreads)
    gdn_step_gated_k(float* __restrict__ out, const float* __restrict__ c, const float* __restrict__ z,
                     const float* __restrict__ a, const float* __restrict__ bg,
                     const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                     const float* __restrict__ nw, float* __restrict__ state, int64_t T, int64_t Hk,
                     int64_t Hv, int dk, int dv, float eps, int act, int norm_threads) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float qs[kGdnMaxDk], ks[kGdnMaxDk], os[kGdnMaxDv];
  __shared__ float red_mem[kGatedThreads], red_out[kGatedThreads];
  __shared__ float red_norm[kGatedThreads / 32][2];
  __shared__ float red[33];
  const int ncols = static_cast<int>(blockDim.x) / kStepRowGroups;
  const int tid = threadIdx.x, tx = tid % ncols, ty = tid / ncols;
  const int64_t h = blockIdx.x, kh = h / (Hv / Hk), kd = Hk * dk, vd = Hv * dv, C = 2 * kd + vd;
  const int b = tx;
  const bool col = b < dv;
  float* S = state + h * static_cast<int64_t>(dk) * dv;
  float s[kStepRows];
  load_state(s, S, dk, dv, b, col, ty);
  const float qscale = 1.0f / sqrtf(static_cast<float>(dk));
  auto load = [&](int64_t t) {
    StepIn in = load_qkv(c, c + kd, c + 2 * kd, t, C, C, h, kh, dk, dv, b, tid);
    in.g = gdn_log_decay(A_log[h], dt_bias[h], a[t * Hv + h]);
    in.beta = gdn_beta(bg[t * Hv + h]);
    return in;
  };
  StepIn cur = load(0);
  for (int64_t t = 0; t < T; ++t) {
    const StepIn nxt = t + 1 < T ? load(t + 1) : cur;
    const float o = step_token(s, cur, true, dk, qscale, tid, tx, ty, ncols, (dk + 31) / 32, qs, ks, red_norm,
                               red_mem, red_out);
    if (ty == 0 && col) os[b] = o;
    __syncthreads();
    const int64_t at = t * vd + h * dv;
    rms_norm_gated_group(out + at, os, z + at, nw, eps, act, dv, norm_threads, red);
    __syncthreads();  // os and red are rewritten by the next token
    cur = nxt;
  }
  store_state(s, S, dk, dv, b, col, ty);
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

void gdn_step_gated(float* out, const float* c, const float* z, const float* a, const float* b,
                    const float* A_log, const float* dt_bias, const float* norm, float* state, int64_t T,
                    int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float eps, int act, cudaStream_t s) {
  if (Hv == 0 || T == 0) return;
  // Named only on failure: this runs for every GDN layer of every decode step.
  auto what = [&] {
    return "gdn_step_gated T " + std::to_string(T) + " Hk " + std::to_string(Hk) + " dk " +
           std::to_string(dk) + " Hv " + std::to_string(Hv) + " dv " + std::to_string(dv);
  };
  if (dk < 1 || dk > kGdnMaxDk || dv < 1 || dv > kGdnMaxDv || Hk < 1 || Hv % Hk != 0)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what() + ": needs dk, dv <= 128 and Hv a multiple of Hk");
  const int ncols = static_cast<int>((dv + 31) / 32 * 32);
  pdl_launch(gdn_step_gated_k, static_cast<unsigned>(Hv), ncols * kStepRowGroups, 0, s, out, c, z, a, b,
             A_log, dt_bias, norm, state, T, Hk, Hv, static_cast<int>(dk), static_cast<int>(dv), eps, act,
             rms_norm_threads(dv));
  BLOOMERY_CUDA_CHECK_LAUNCH(what());
}

}  // namespace bloomery::cuda
