// qwen4_exp hyper-connection read mix / stream write and the PLE stream gate (models.md §3.5, §3.6): small
// fused elementwise and reduction kernels over [T, n·D] activations (D = 2560, n = 4 at real size).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/qwen4_kernels.h"
#include "backend/cuda/gemv/unit_dot.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {
namespace {

unsigned hc_grid(int64_t n, int threads) {
  const int64_t g = (n + threads - 1) / threads;
  return static_cast<unsigned>(g < 65535 * 16 ? g : 65535 * 16);
}

__global__ void hc_read_mix_k(float* u, const float* m, const float* xn, int64_t T, int n, int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  const float nf = static_cast<float>(n);
  // Tokens on x (strided), one column per thread on y: no 64-bit division of a flat index per element.
  const int64_t d = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (d >= D) return;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const int64_t i = t * D + d;
    float acc = 0.0f;
    for (int s = 0; s < n; ++s) {
      const int64_t j = (t * n + s) * D + d;
      acc = __fadd_rn(acc, __fmul_rn(1.0f / (1.0f + expf(-m[j])), xn[j]));
    }
    u[i] = acc / nf;  // divided by n as the CPU op does (not multiplied by 1/n)
  }
}

// The read's up product and mix: a warp per column d computes the n rows d, D + d, … of m = a · upᵀ (their
// units loaded together, two batches ahead, so a short row is one round trip to memory) and mixes them
// into u[t, d]; m never goes to memory and the mix needs no launch of its own (measured with Nsight Compute
// on an H200 at T = 1: the up GEMV [10240, 320] took 8.5 µs and the mix 4.5 µs, 97 times a step). Each m is
// summed as the split-K GEMV sums a row with one warp (unit partials, the unit's scale, lanes' sums by the
// xor tree), and the mix rounds as hc_read_mix_k does.
constexpr int kUpMixWarps = 8, kUpMixStreams = 4, kUpMixAhead = 2;

template <Width W>
__global__ void __launch_bounds__(kUpMixWarps * 32)
    hc_up_mix_k(DeviceWeight w, const float* __restrict__ a, const float* __restrict__ xn,
                float* __restrict__ u, int T, int n, int64_t D) {
  constexpr int E = Unit<W>::kElems;
  const int lane = threadIdx.x & 31;
  const int64_t d = blockIdx.x * static_cast<int64_t>(kUpMixWarps) + (threadIdx.x >> 5);
  const bool active = d < D;
  const uint64_t K = w.cols, units = K / E;
  const bool f16 = w.format == FormatId::F16;
  RawUnit<W> raw[kUpMixAhead][kUpMixStreams];
  const auto load_batch = [&](uint64_t u0) {
#pragma unroll
    for (int i = 0; i < kUpMixAhead; ++i)
#pragma unroll
      for (int s = 0; s < kUpMixStreams; ++s) {
        const uint64_t un = u0 + 32 * i;
        raw[i][s] = active && s < n && un < units ? load_unit<W>(w, s * D + d, un * E) : RawUnit<W>{};
      }
  };
  load_batch(lane);  // weights need no wait (misc/pdl.cuh)
  pdl_wait();
  pdl_launch_dependents();
  float acc[kUpMixStreams][kGemvMaxRows] = {};
  for (uint64_t u0 = lane; u0 < units; u0 += 32 * kUpMixAhead) {
    if (u0 != static_cast<uint64_t>(lane)) load_batch(u0);
#pragma unroll
    for (int i = 0; i < kUpMixAhead; ++i) {
      const uint64_t un = u0 + 32 * i;
      if (un >= units) break;
#pragma unroll
      for (int s = 0; s < kUpMixStreams; ++s) {
        if (s >= n) break;
        unit_dot_rows<W>(raw[i][s], f16, a, K, un * E, T, acc[s]);
      }
    }
  }
  const float post = row_post_scale<W>(w), nf = static_cast<float>(n);
#pragma unroll
  for (int t = 0; t < kGemvMaxRows; ++t) {
    if (t >= T) break;
    float mix = 0.0f;
#pragma unroll
    for (int s = 0; s < kUpMixStreams; ++s) {
      if (s >= n) break;
      const float m = warp_reduce_sum(acc[s][t]) * post;
      if (active) mix = __fadd_rn(mix, __fmul_rn(1.0f / (1.0f + expf(-m)), xn[(t * n + s) * D + d]));
    }
    if (lane == 0 && active) u[t * D + d] = mix / nf;
  }
}

__global__ void hc_inject_k(float* X, const float* y, const float* inj, int64_t T, int n, int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t total = T * n * D;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ts = i / D, d = i % D, t = ts / n;
    X[i] = __fadd_rn(X[i], __fmul_rn(inj[ts], y[t * D + d]));  // product rounded first, as on the CPU
  }
}

// One block per (t, s), with the norm kernel's thread count, loop order and reduction: the stream write as
// hc_inject_k rounds it, then that stream's RMSNorm as rms_norm_k computes it (the same bits as the two).
__global__ void hc_inject_norm_k(float* X, const float* y, const float* inj, float* xn, const float* w,
                                 float eps, int kind, int n, int64_t D, bool w_per_group) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float red[33];
  const int64_t g = blockIdx.x, t = g / n;
  float* xg = X + g * D;
  const float* yt = y + t * D;
  const float a = inj[g];
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = __fadd_rn(xg[i], __fmul_rn(a, yt[i]));
    xg[i] = v;
    ss += v * v;
  }
  ss = block_reduce_sum(ss, red);
  const float s = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  const float* wg = w ? (w_per_group ? w + (g % n) * D : w) : nullptr;
  float* out = xn + g * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = xg[i] * s;
    out[i] = kind == 0 ? wg[i] * v : (kind == 1 ? v * (1.0f + wg[i]) : v);
  }
}

// One block per (t, s): the dot over D, then the gate times v.
__global__ void ple_gate_k(float* G, const float* kn, const float* qn, const float* v, int n, int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float red[33];
  const int64_t ts = blockIdx.x, t = ts / n;
  const float* k = kn + ts * D;
  const float* q = qn + ts * D;
  float part = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) part += k[d] * q[d];
  const float dot = block_reduce_sum(part, red);
  float g = dot / sqrtf(static_cast<float>(D));
  const float sign = g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);
  g = sqrtf(fmaxf(fabsf(g), 1e-6f)) * sign;
  const float gate = 1.0f / (1.0f + expf(-g));
  float* out = G + ts * D;
  const float* vt = v + t * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) out[d] = gate * vt[d];
}

std::string shape(int64_t T, int n, int64_t D) {
  return "[" + std::to_string(T) + ", " + std::to_string(n) + "·" + std::to_string(D) + "]";
}

}  // namespace

void hc_read_mix(float* u, const float* m, const float* xn, int64_t T, int n, int64_t D, cudaStream_t s) {
  if (T * D == 0) return;
  const dim3 grid(static_cast<unsigned>(T < 65535 * 16 ? T : 65535 * 16),
                  static_cast<unsigned>((D + 255) / 256));
  pdl_launch(hc_read_mix_k, grid, 256, 0, s, u, m, xn, T, n, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("hc_read_mix m " + shape(T, n, D));
}

// One row only: at four rows (C = 4 decode) the tensor-core GEMV (gemv_tc.cu) and the mix as two launches
// were faster on the H200 (bench --ab block-ops, C = 4: 16.36 ms a step with the separate ops against 17.23
// with this kernel at T = 4; at C = 1 7.95 against 8.26 in its favour).
constexpr int64_t kUpMixMaxRows = 1;

bool hc_up_mix_applies(const DeviceWeight& up, const float* a, int64_t T, int n) {
  return T >= 1 && T <= kUpMixMaxRows && n >= 1 && n <= kUpMixStreams && unit_path(up) &&
         reinterpret_cast<uintptr_t>(a) % 16 == 0;
}

void hc_up_mix(float* u, const float* a, const DeviceWeight& up, const float* xn, int64_t T, int n, int64_t D,
               cudaStream_t s) {
  if (T * D == 0) return;
  const unsigned blocks = static_cast<unsigned>((D + kUpMixWarps - 1) / kUpMixWarps);
  with_width(width_of(up.format), [&](auto Wc) {
    pdl_launch(hc_up_mix_k<decltype(Wc)::value>, blocks, kUpMixWarps * 32, 0, s, up, a, xn, u,
               static_cast<int>(T), n, D);
  });
  BLOOMERY_CUDA_CHECK_LAUNCH("hc_up_mix up [" + std::to_string(up.rows) + ", " + std::to_string(up.cols) +
                             "] u " + shape(T, n, D));
}

void hc_inject(float* X, const float* y, const float* inj, int64_t T, int n, int64_t D, cudaStream_t s) {
  if (T * n * D == 0) return;
  pdl_launch(hc_inject_k, hc_grid(T * n * D, 256), 256, 0, s, X, y, inj, T, n, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("hc_inject X " + shape(T, n, D));
}

void hc_inject_norm(float* X, const float* y, const float* inj, float* xn, const float* w, float eps,
                    int kind, int64_t T, int n, int64_t D, bool w_per_group, cudaStream_t s) {
  if (T * n * D == 0) return;
  pdl_launch(hc_inject_norm_k, static_cast<unsigned>(T * n), rms_norm_threads(D), 0, s, X, y, inj, xn, w, eps,
             kind, n, D, w_per_group);
  BLOOMERY_CUDA_CHECK_LAUNCH("hc_inject_norm X " + shape(T, n, D));
}

void ple_gate(float* G, const float* kn, const float* qn, const float* v, int64_t T, int n, int64_t D,
              cudaStream_t s) {
  if (T * n == 0) return;
  pdl_launch(ple_gate_k, static_cast<unsigned>(T * n), 256, 0, s, G, kn, qn, v, n, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("ple_gate G " + shape(T, n, D));
}

}  // namespace bloomery::cuda
