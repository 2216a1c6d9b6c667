// glm5_next mHC (models.md §4.5): the per-token mix (unweighted RMSNorm of all n·D stream values, the
// (2+n)·n mix rows read from fn in its stored format), the pre/post gates, the row softmax + Sinkhorn
// combine matrix, the collapsed input; the stream write-back and the final stream mean. f32 throughout, in
// the CPU op's order (backend/cpu/mhc.cc) where it is cheap to keep.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/glm_kernels.h"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kMhcThreads = 256;
constexpr int kMaxMix = (2 + kMhcMaxStreams) * kMhcMaxStreams;

// Sum over the block in f64 (every thread gets it); red holds 33 doubles.
__device__ __forceinline__ double block_sum_f64(double v, double* red) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  __syncthreads();
  if (lane == 0) red[wid] = v;
  __syncthreads();
  if (wid == 0) {
    double s = lane < nw ? red[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) red[32] = s;
  }
  __syncthreads();
  return red[32];
}

__device__ __forceinline__ float sigmoidf_(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Row softmax + hc_eps, then column / row normalisations (mhc_sinkhorn of the CPU op), on one thread.
__device__ void sinkhorn(const float* logits, int n, float hc_eps, int iters, float* c) {
  for (int i = 0; i < n; ++i) {
    float mx = logits[i * n];
    for (int j = 1; j < n; ++j) mx = fmaxf(mx, logits[i * n + j]);
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += (c[i * n + j] = expf(logits[i * n + j] - mx));
    for (int j = 0; j < n; ++j) c[i * n + j] = c[i * n + j] / sum + hc_eps;
  }
  auto cols = [&] {
    for (int j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int i = 0; i < n; ++i) s += c[i * n + j];
      for (int i = 0; i < n; ++i) c[i * n + j] /= (s + hc_eps);
    }
  };
  cols();
  for (int it = 0; it < iters - 1; ++it) {
    for (int i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int j = 0; j < n; ++j) s += c[i * n + j];
      for (int j = 0; j < n; ++j) c[i * n + j] /= (s + hc_eps);
    }
    cols();
  }
}

// One block per token.
__global__ void __launch_bounds__(kMhcThreads)
    mhc_pre_k(float* h, float* post, float* comb, const float* X, DeviceWeight fn, const float* base,
              const float* scale, int n, int64_t D, float norm_eps, float hc_eps, int iters) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ double red[33];
  __shared__ float mix[kMaxMix], pre[kMhcMaxStreams], cm[kMhcMaxStreams * kMhcMaxStreams];
  const int64_t t = blockIdx.x, nD = n * D;
  const float* x = X + t * nD;
  // Σx² and the mix dots in f64, as the CPU op (16384-term sums whose f32 rounding the gates would amplify).
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < nD; i += kMhcThreads) ss += static_cast<double>(x[i]) * x[i];
  ss = block_sum_f64(ss, red);
  const float inv = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(nD)) + norm_eps);
  const int M = (2 + n) * n;
  for (int o = 0; o < M; ++o) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < nD; i += kMhcThreads)
      acc += static_cast<double>(weight_element(fn, o, i)) * (x[i] * inv);
    acc = block_sum_f64(acc, red);
    if (threadIdx.x == 0) mix[o] = static_cast<float>(acc);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < n; ++s) {
      pre[s] = sigmoidf_(mix[s] * scale[0] + base[s]) + hc_eps;
      post[t * n + s] = 2.0f * sigmoidf_(mix[n + s] * scale[1] + base[n + s]);
    }
    float logits[kMhcMaxStreams * kMhcMaxStreams];
    for (int k = 0; k < n * n; ++k) logits[k] = mix[2 * n + k] * scale[2] + base[2 * n + k];
    sinkhorn(logits, n, hc_eps, iters, cm);
    for (int k = 0; k < n * n; ++k) comb[t * n * n + k] = cm[k];
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += kMhcThreads) {
    float acc = 0.0f;
    for (int s = 0; s < n; ++s) acc += pre[s] * x[s * D + d];
    h[t * D + d] = acc;
  }
}

// One thread per (t, d): all n streams of that column read first, then written.
__global__ void mhc_post_k(float* X, const float* y, const float* post, const float* comb, int64_t T, int n,
                           int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * D;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, d = i % D;
    float* x = X + t * n * D + d;
    float old[kMhcMaxStreams];
    for (int j = 0; j < n; ++j) old[j] = x[j * D];
    const float* c = comb + t * n * n;
    const float yv = y[t * D + d];
    for (int s = 0; s < n; ++s) {
      float acc = 0.0f;
      for (int j = 0; j < n; ++j) acc += c[j * n + s] * old[j];
      x[s * D] = post[t * n + s] * yv + acc;
    }
  }
}

__global__ void stream_mean_k(float* out, const float* X, int64_t T, int n, int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * D;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, d = i % D;
    float acc = 0.0f;
    for (int s = 0; s < n; ++s) acc += X[(t * n + s) * D + d];
    out[i] = acc / static_cast<float>(n);
  }
}

unsigned mhc_grid(int64_t n, int threads) {
  const int64_t g = (n + threads - 1) / threads;
  return static_cast<unsigned>(g < 65535 * 16 ? g : 65535 * 16);
}

std::string shape(int64_t T, int n, int64_t D) {
  return "[" + std::to_string(T) + ", " + std::to_string(n) + "·" + std::to_string(D) + "]";
}

}  // namespace

void mhc_pre(float* h, float* post, float* comb, const float* X, const DeviceWeight& fn, const float* base,
             const float* scale, int64_t T, int n, int64_t D, float norm_eps, float hc_eps,
             int sinkhorn_iters, cudaStream_t s) {
  if (T == 0) return;
  if (n < 1 || n > kMhcMaxStreams)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, "mhc_pre X " + shape(T, n, D) + ": needs 1 <= n <= 8");
  pdl_launch(mhc_pre_k, static_cast<unsigned>(T), kMhcThreads, 0, s, h, post, comb, X, fn, base, scale, n, D,
             norm_eps, hc_eps, sinkhorn_iters);
  BLOOMERY_CUDA_CHECK_LAUNCH("mhc_pre X " + shape(T, n, D));
}

void mhc_post(float* X, const float* y, const float* post, const float* comb, int64_t T, int n, int64_t D,
              cudaStream_t s) {
  if (T * D == 0) return;
  if (n < 1 || n > kMhcMaxStreams)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, "mhc_post X " + shape(T, n, D) + ": needs 1 <= n <= 8");
  pdl_launch(mhc_post_k, mhc_grid(T * D, 256), 256, 0, s, X, y, post, comb, T, n, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("mhc_post X " + shape(T, n, D));
}

void stream_mean(float* out, const float* X, int64_t T, int n, int64_t D, cudaStream_t s) {
  if (T * D == 0) return;
  pdl_launch(stream_mean_k, mhc_grid(T * D, 256), 256, 0, s, out, X, T, n, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("stream_mean X " + shape(T, n, D));
}

}  // namespace bloomery::cuda
