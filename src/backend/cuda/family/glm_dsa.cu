// glm5_next DSA indexer (models.md §4.7): pool finalisation (per-channel softmax over a pool's P members of
// gate + ape, weighting their keys) and the pool scores of the queries. The top-k selection over the scores
// is qwen4_exp's stable radix select (family/qsa_index.cu, qsa_select_blocks): the same rule (top-k complete
// pools, lower index wins exact ties, plus the open tail).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/glm_kernels.h"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

// One thread per (pool, channel).
__global__ void dsa_pool_k(float* pools, const float* keys, const float* gates, const float* ape, int64_t p0,
                           int64_t np, int d, int P) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= np * d) return;
  const int64_t p = p0 + i / d;
  const int j = static_cast<int>(i % d);
  const int64_t first = p * P;
  float mx = -INFINITY;
  for (int m = 0; m < P; ++m) mx = fmaxf(mx, gates[(first + m) * d + j] + ape[m * d + j]);
  float sum = 0.0f;
  for (int m = 0; m < P; ++m) sum += expf(gates[(first + m) * d + j] + ape[m * d + j] - mx);
  float acc = 0.0f;
  for (int m = 0; m < P; ++m)
    acc += (expf(gates[(first + m) * d + j] + ape[m * d + j] - mx) / sum) * keys[(first + m) * d + j];
  pools[p * d + j] = acc;
}

constexpr int kScorePools = 128;  // pools per block (one per thread)

// Block (pool chunk, query): the query's qi [Hi, d] and weights in shared memory (read as broadcasts), each
// thread one pool with the Hi dot products accumulated together over the channels. Every dot runs over j in
// the CPU op's order, without FMA, so the scores are bit-identical to backend/cpu/mla_dsa.cc's.
__global__ void __launch_bounds__(kScorePools)
    dsa_scores_k(float* scores, int64_t ld, const float* qi, const float* wts, const float* pools, int Hi,
                 int d, int64_t q_first, int P, float scale) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ float sh[];
  float* qs = sh;           // [Hi, d]
  float* ws = sh + Hi * d;  // [Hi]
  const int64_t t = blockIdx.y;
  for (int i = threadIdx.x; i < Hi * d; i += kScorePools) qs[i] = qi[t * Hi * d + i];
  for (int i = threadIdx.x; i < Hi; i += kScorePools) ws[i] = wts[t * Hi + i];
  __syncthreads();
  const int64_t np = (q_first + t + 1) / P;
  const int64_t p = blockIdx.x * int64_t(kScorePools) + threadIdx.x;
  if (p >= np) return;
  const float* kp = pools + p * d;
  float acc[kDsaMaxHeads];
#pragma unroll
  for (int h = 0; h < kDsaMaxHeads; ++h) acc[h] = 0.0f;
  for (int j = 0; j < d; ++j) {
    const float kv = kp[j];
#pragma unroll
    for (int h = 0; h < kDsaMaxHeads; ++h)
      if (h < Hi) acc[h] = __fadd_rn(acc[h], __fmul_rn(qs[h * d + j], kv));
  }
  float total = 0.0f;
#pragma unroll
  for (int h = 0; h < kDsaMaxHeads; ++h)
    if (h < Hi) {
      const float x = __fmul_rn(acc[h], scale);
      total = __fadd_rn(total, __fmul_rn(ws[h], x < 0.0f ? 0.0f : x));  // std::max(x, 0)
    }
  scores[t * ld + p] = total;
}

}  // namespace

void dsa_pool(float* pools, const float* keys, const float* gates, const float* ape, int64_t p0, int64_t np,
              int d, int P, cudaStream_t s) {
  if (np <= 0 || d <= 0) return;
  const int64_t n = np * d;
  pdl_launch(dsa_pool_k, static_cast<unsigned>((n + 255) / 256), 256, 0, s, pools, keys, gates, ape, p0, np,
             d, P);
  BLOOMERY_CUDA_CHECK_LAUNCH("dsa_pool pools " + std::to_string(p0) + "+" + std::to_string(np) + " × " +
                             std::to_string(d) + " pool " + std::to_string(P));
}

void dsa_pool_scores(float* scores, int64_t ld, const float* qi, const float* wts, const float* pools,
                     int64_t T, int Hi, int d, int64_t q_first, int P, float scale, cudaStream_t s) {
  const int64_t np_max = (q_first + T) / P;
  if (T <= 0 || np_max <= 0) return;
  const std::string what = "dsa_pool_scores qi [" + std::to_string(T) + ", " + std::to_string(Hi) + ", " +
                           std::to_string(d) + "] pools " + std::to_string(np_max);
  if (Hi < 1 || Hi > kDsaMaxHeads || T > 65535)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": needs 1 <= Hi <= 64 and T <= 65535 per launch");
  const size_t shmem = static_cast<size_t>(Hi) * (d + 1) * sizeof(float);
  if (shmem > 48 * 1024) BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": qi row over 48 KiB");
  const dim3 grid(static_cast<unsigned>((np_max + kScorePools - 1) / kScorePools), static_cast<unsigned>(T));
  pdl_launch(dsa_scores_k, grid, kScorePools, shmem, s, scores, ld, qi, wts, pools, Hi, d, q_first, P, scale);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

}  // namespace bloomery::cuda
