// glm5_next sigmoid noaux_tc router (models.md §1.3, transformers' Glm5NextTextTopkRouter): one warp per
// token. Sigmoid scores, the correction bias for the choice only, the optional group filter, then k rounds of
// a warp argmax (larger choice first, the lower expert index on exact ties: the CPU's stable sort), the same
// tie rule as backend/cpu/glm_moe.cc (the k-th and (k+1)-th choices equal).
#include <climits>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/glm_kernels.h"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxGroups = 64;

// The better of (v, i) and (ov, oi): larger value, then lower index.
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
}

__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    const int oi = __shfl_xor_sync(0xFFFFFFFFu, i, o);
    better(v, i, ov, oi);
  }
}

// The best not-yet-taken entry of x[0, n) over the warp (taken: flags in `taken`).
__device__ __forceinline__ void warp_argmax(const float* x, const unsigned char* taken, int n, int lane,
                                            float& v, int& i) {
  v = -INFINITY, i = INT_MAX;
  for (int e = lane; e < n; e += 32)
    if (!taken[e]) better(v, i, x[e], e);
  warp_best(v, i);
}

__global__ void __launch_bounds__(kWarps * 32)
    route_sigmoid_k(int32_t* ids, float* weights, const float* logits, const float* bias, int64_t T, int E,
                    int k, int n_group, int topk_group, bool renorm, float scaling, int* ties) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ unsigned char sh[];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const int64_t t = blockIdx.x * int64_t(kWarps) + wid;
  if (t >= T) return;  // whole warps leave together
  float* s = reinterpret_cast<float*>(sh) + wid * 2 * E;
  float* choice = s + E;
  unsigned char* taken = sh + kWarps * 2 * E * sizeof(float) + wid * (E + kMaxGroups);
  unsigned char* gtaken = taken + E;
  const float* lg = logits + t * E;
  for (int e = lane; e < E; e += 32) {
    s[e] = 1.0f / (1.0f + expf(-lg[e]));
    choice[e] = s[e] + (bias ? bias[e] : 0.0f);
    taken[e] = 0;
  }
  __syncwarp();
  bool tie = false;
  if (n_group > 1) {
    // Group scores: the sum of each group's two best choices.
    __shared__ float gscore[kWarps][kMaxGroups];
    const int per = E / n_group;
    for (int g = lane; g < n_group; g += 32) {
      float a = -INFINITY, b = -INFINITY;
      for (int e = g * per; e < (g + 1) * per; ++e) {
        const float x = choice[e];
        if (x > a)
          b = a, a = x;
        else if (x > b)
          b = x;
      }
      gscore[wid][g] = a + (per > 1 ? b : 0.0f);
      gtaken[g] = 0;
    }
    __syncwarp();
    const int kg = topk_group < n_group ? topk_group : n_group;
    float v = 0.0f;
    int i = 0;
    for (int r = 0; r < kg; ++r) {
      warp_argmax(gscore[wid], gtaken, n_group, lane, v, i);
      if (lane == 0) gtaken[i] = 1;
      __syncwarp();
    }
    if (kg > 0 && kg < n_group) {
      const float kth = v;
      warp_argmax(gscore[wid], gtaken, n_group, lane, v, i);
      tie = tie || v == kth;
    }
    for (int e = lane; e < E; e += 32)
      if (!gtaken[e / per]) choice[e] = -INFINITY;
    __syncwarp();
  }
  float v = 0.0f, wsum = 0.0f;
  int i = 0;
  int32_t* id = ids + t * k;
  float* w = weights + t * k;
  for (int r = 0; r < k; ++r) {
    warp_argmax(choice, taken, E, lane, v, i);
    if (lane == 0) {
      taken[i] = 1;
      id[r] = i;
      w[r] = s[i];
      wsum += s[i];
    }
    __syncwarp();
  }
  if (k > 0 && k < E) {
    const float kth = v;
    warp_argmax(choice, taken, E, lane, v, i);
    tie = tie || v == kth;
  }
  if (lane == 0) {
    for (int r = 0; r < k; ++r) {
      if (renorm) w[r] /= (wsum + 1e-20f);
      w[r] *= scaling;
    }
    if (tie) atomicAdd(ties, 1);
  }
}

}  // namespace

void route_sigmoid_topk(int32_t* ids, float* weights, const float* logits, const float* bias, int64_t T,
                        int64_t E, int k, int n_group, int topk_group, bool renormalize, float routed_scaling,
                        int* ties, cudaStream_t s) {
  if (T == 0) return;
  const std::string what = "route_sigmoid_topk logits [" + std::to_string(T) + ", " + std::to_string(E) +
                           "] k " + std::to_string(k) + " groups " + std::to_string(n_group);
  const size_t shmem = kWarps * (2 * E * sizeof(float) + E + kMaxGroups);
  if (k < 0 || k > E || n_group < 1 || n_group > kMaxGroups || E % n_group != 0 || shmem > 48 * 1024)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what +
                                                   ": needs k <= E, 1 <= n_group <= 64 dividing E, "
                                                   "E <= 1400");
  const unsigned blocks = static_cast<unsigned>((T + kWarps - 1) / kWarps);
  pdl_launch(route_sigmoid_k, blocks, kWarps * 32, shmem, s, ids, weights, logits, bias, T,
             static_cast<int>(E), k, n_group, topk_group, renormalize, routed_scaling, ties);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

}  // namespace bloomery::cuda
