// Softmax top-k router (softmax in f32, then k rounds of an argmax, ties to the lower expert as the CPU's
// stable sort: a warp per token with the row in registers, or a block per token for wide rows) and the gather
// / weighted scatter that run routed experts per expert.
#include <atomic>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    router_k(int32_t* ids, float* weights, const float* logits, int64_t E, int k, bool renormalize) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ float p[];  // E floats
  __shared__ float red[33];
  __shared__ float best_v[kThreads / 32];
  __shared__ int best_i[kThreads / 32];
  __shared__ float chosen[64];
  __shared__ int chosen_i[64];
  const int64_t t = blockIdx.x;
  const float* l = logits + t * E;
  float mx = -INFINITY;
  for (int64_t e = threadIdx.x; e < E; e += kThreads) mx = fmaxf(mx, l[e]);
  mx = block_reduce_max(mx, red);
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < E; e += kThreads) sum += (p[e] = expf(l[e] - mx));
  sum = block_reduce_sum(sum, red);
  for (int64_t e = threadIdx.x; e < E; e += kThreads) p[e] /= sum;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int j = 0; j < k; ++j) {
    float bv = -1.0f;
    int bi = 0x7FFFFFFF;
    for (int64_t e = threadIdx.x; e < E; e += kThreads)
      if (p[e] > bv) bv = p[e], bi = static_cast<int>(e);  // ascending e: first max wins
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    if (lane == 0) best_v[warp] = bv, best_i[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
      float v = best_v[0];
      int i = best_i[0];
      for (int w = 1; w < kThreads / 32; ++w)
        if (best_v[w] > v || (best_v[w] == v && best_i[w] < i)) v = best_v[w], i = best_i[w];
      chosen[j] = v;
      chosen_i[j] = i;
      p[i] = -2.0f;  // taken
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float tot = 0.0f;
    for (int j = 0; j < k; ++j) tot += chosen[j];
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = chosen_i[j];
      weights[t * k + j] = renormalize ? chosen[j] / tot : chosen[j];
    }
  }
}

// One warp per token (kRouterWarps tokens a block): lane l holds the softmax of experts l, l + 32, ... in
// registers, so each of the k rounds is a lane-local argmax and a five-step xor argmax (value, then the lower
// expert), with no shared memory and no block barrier (the block kernel's 2k barriers were most of its
// 12 µs a call at E = 512, k = 10). The choice, the ties and the weights' sum order equal router_k's; the
// softmax sum rounds in another order.
constexpr int kRouterWarps = 4;
constexpr int kRouterWarpMaxE = 1024, kRouterWarpMaxK = 32;

template <int PER>  // experts per lane: E <= 32·PER
__global__ void __launch_bounds__(kRouterWarps * 32)
    router_warp_k(int32_t* ids, float* weights, const float* logits, int64_t T, int64_t E, int k,
                  bool renormalize) {
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x * static_cast<int64_t>(kRouterWarps) + (threadIdx.x >> 5);
  if (t >= T) return;  // whole warp
  const float* l = logits + t * E;
  float p[PER];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int64_t e = lane + 32 * j;
    p[j] = e < E ? l[e] : -INFINITY;
    mx = fmaxf(mx, p[j]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < PER; ++j)
    if (lane + 32 * j < E) sum += (p[j] = expf(p[j] - mx));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
#pragma unroll
  for (int j = 0; j < PER; ++j) p[j] = lane + 32 * j < E ? p[j] / sum : -1.0f;  // -1: never chosen
  float mine = 0.0f, tot = 0.0f;  // lane j keeps round j's weight; every lane sums them in round order
  int mine_i = 0;
  for (int r = 0; r < k; ++r) {
    float bv = -1.0f;
    int bi = 0x7FFFFFFF;
#pragma unroll
    for (int j = 0; j < PER; ++j)
      if (p[j] > bv) bv = p[j], bi = lane + 32 * j;  // ascending expert: the first max wins
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
#pragma unroll
    for (int j = 0; j < PER; ++j)
      if (lane + 32 * j == bi) p[j] = -2.0f;  // taken
    if (lane == r) mine = bv, mine_i = bi;
    tot += bv;
  }
  if (lane < k) {
    ids[t * k + lane] = mine_i;
    weights[t * k + lane] = renormalize ? mine / tot : mine;
  }
}

std::atomic<bool>& router_warp_slot() {
  static std::atomic<bool> on{!env_is("BLOOMERY_CUDA_ROUTER_WARP", "0")};
  return on;
}

__global__ void gather_tokens_k(float* xs, const float* x, const int32_t* rows, int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t i = blockIdx.x;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) xs[i * D + c] = x[rows[i] * D + c];
}

__global__ void scatter_add_k(float* out, const float* ys, const int32_t* rows, const int32_t* slots,
                              const float* wts, int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t i = blockIdx.x;
  const float w = wts[slots[i]];
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) out[rows[i] * D + c] += ys[i * D + c] * w;
}

}  // namespace

void route_softmax_topk(int32_t* ids, float* weights, const float* logits, int64_t T, int64_t E, int k,
                        bool renormalize, cudaStream_t s) {
  const std::string what = "route_softmax_topk logits[" + std::to_string(T) + ", " + std::to_string(E) +
                           "] k " + std::to_string(k);
  if (k > 64) BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue, what + ": top_k > 64");
  if (T == 0) return;
  if (router_warp() && E <= kRouterWarpMaxE && k <= kRouterWarpMaxK) {
    const unsigned blocks = static_cast<unsigned>((T + kRouterWarps - 1) / kRouterWarps);
    auto launch = [&](auto kernel) {
      pdl_launch(kernel, blocks, kRouterWarps * 32, 0, s, ids, weights, logits, T, E, k, renormalize);
    };
    // Experts per lane rounded up to a power of two: four instantiations cover E <= 1024.
    if (E <= 128)
      launch(router_warp_k<4>);
    else if (E <= 256)
      launch(router_warp_k<8>);
    else if (E <= 512)
      launch(router_warp_k<16>);
    else
      launch(router_warp_k<32>);
  } else {
    pdl_launch(router_k, static_cast<unsigned>(T), kThreads, E * sizeof(float), s, ids, weights, logits, E, k,
               renormalize);
  }
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

bool router_warp() {
  return router_warp_slot().load(std::memory_order_relaxed);
}

void set_router_warp(bool on) {
  router_warp_slot().store(on, std::memory_order_relaxed);
}

void gather_tokens(float* xs, const float* x, const int32_t* rows, int64_t count, int64_t D, cudaStream_t s) {
  if (count == 0) return;
  pdl_launch(gather_tokens_k, static_cast<unsigned>(count), 256, 0, s, xs, x, rows, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("moe gather_tokens [" + std::to_string(count) + ", " + std::to_string(D) + "]");
}

void scatter_add_scaled(float* out, const float* ys, const int32_t* rows, const int32_t* slots,
                        const float* wts, int64_t count, int64_t D, cudaStream_t s) {
  if (count == 0) return;
  pdl_launch(scatter_add_k, static_cast<unsigned>(count), 256, 0, s, out, ys, rows, slots, wts, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("moe scatter_add [" + std::to_string(count) + ", " + std::to_string(D) + "]");
}

}  // namespace bloomery::cuda
