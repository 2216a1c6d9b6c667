// Token sampling on the card, one block per row of logits: greedy (argmax, lowest index on ties), or
// llama-server's order as the CPU sampler (runtime/sampler.cc): top-k, top-p and min-p cuts on the
// temperature-1 distribution (each found as a probability threshold by bisection on the f32 bit pattern, no
// sort; top-p's mass is that of the top-k survivors, min-p is relative to the largest), then the temperature
// on the survivors → one draw from a counter-based generator (seed, step, row). A token whose probability
// equals a cut threshold is kept, so ties at a cut may keep a few more than top_k.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Block argmax of v[0..V), ties to the lower index.
__device__ int block_argmax(const float* v, int64_t V, float* sv, int* si) {
  float bv = -INFINITY;
  int bi = 0x7FFFFFFF;
  for (int64_t i = threadIdx.x; i < V; i += kThreads)
    if (v[i] > bv) bv = v[i], bi = static_cast<int>(i);
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
    const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
  }
  if ((threadIdx.x & 31) == 0) sv[threadIdx.x >> 5] = bv, si[threadIdx.x >> 5] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (sv[w] > sv[0] || (sv[w] == sv[0] && si[w] < si[0])) sv[0] = sv[w], si[0] = si[w];
  }
  __syncthreads();
  const int r = si[0];
  __syncthreads();
  return r == 0x7FFFFFFF ? 0 : r;
}

__global__ void __launch_bounds__(kThreads)
    sample_k(int32_t* ids, const float* logits, int64_t V, SampleParams sp, float* scratch) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ float red[33];
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float chunk_sum[kThreads];
  const int64_t r = blockIdx.x;
  const float* l = logits + r * V;
  if (sp.temperature <= 0.0f || sp.top_k == 1) {
    const int best = block_argmax(l, V, sv, si);
    if (threadIdx.x == 0) ids[r] = best;
    return;
  }
  float* p = scratch + r * V;
  // Unnormalised temperature-1 probabilities p = exp(l − max): the largest is exactly 1.
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) mx = fmaxf(mx, l[i]);
  mx = block_reduce_max(mx, red);
  for (int64_t i = threadIdx.x; i < V; i += kThreads) p[i] = expf(l[i] - mx);
  __syncthreads();
  float cut = 0.0f;
  // Bisection over positive floats (their bit patterns are ordered) for the largest τ with pred(τ).
  auto largest = [&](auto pred) {
    uint32_t lo = 0, hi = 0x3F800000u;  // τ in [0, 1]
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      if (pred(__uint_as_float(mid)))
        lo = mid;
      else
        hi = mid - 1;
    }
    return __uint_as_float(lo);
  };
  if (sp.top_k > 0 && sp.top_k < V) {
    const float tk = largest([&](float tau) {
      float c = 0.0f;
      for (int64_t i = threadIdx.x; i < V; i += kThreads) c += p[i] >= tau ? 1.0f : 0.0f;
      return block_reduce_sum(c, red) >= static_cast<float>(sp.top_k);
    });
    cut = fmaxf(cut, tk);
  }
  if (sp.top_p < 1.0f) {
    float mass = 0.0f;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) mass += p[i] >= cut ? p[i] : 0.0f;
    const float want = block_reduce_sum(mass, red) * sp.top_p;
    const float tp = largest([&](float tau) {
      float m = 0.0f;
      const float t2 = fmaxf(tau, cut);
      for (int64_t i = threadIdx.x; i < V; i += kThreads) m += p[i] >= t2 ? p[i] : 0.0f;
      return block_reduce_sum(m, red) >= want;
    });
    cut = fmaxf(cut, tp);
  }
  if (sp.min_p > 0.0f) cut = fmaxf(cut, sp.min_p);  // min-p: p ≥ min_p · p_max, p_max = 1
  // The temperature on the survivors: their draw weights exp((l − max) / T); the cut tokens weigh 0.
  for (int64_t i = threadIdx.x; i < V; i += kThreads)
    p[i] = p[i] >= cut ? expf((l[i] - mx) / sp.temperature) : 0.0f;
  __syncthreads();
  // Inverse CDF over the kept tokens in index order: contiguous chunks per thread, a scan of chunk sums.
  const int64_t chunk = (V + kThreads - 1) / kThreads, c0 = threadIdx.x * chunk;
  const int64_t c1 = c0 + chunk < V ? c0 + chunk : V;
  float own = 0.0f;
  for (int64_t i = c0; i < c1; ++i) own += p[i];
  chunk_sum[threadIdx.x] = own;
  __syncthreads();
  if (threadIdx.x == 0) {
    float run = 0.0f;
    for (int t = 0; t < kThreads; ++t) {
      const float s = chunk_sum[t];
      chunk_sum[t] = run;
      run += s;
    }
    const uint64_t bits =
        splitmix64(sp.seed ^ splitmix64(sp.step * 0x100000001B3ull + static_cast<uint64_t>(r)));
    red[0] = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f) * run;  // u · kept mass, u in [0, 1)
    si[0] = -1;
  }
  __syncthreads();
  const float target = red[0];
  const float before = chunk_sum[threadIdx.x];
  if (own > 0.0f && target >= before && target < before + own) {
    float run = before;
    int64_t pick = -1;
    for (int64_t i = c0; i < c1; ++i)
      if (p[i] > 0.0f) {
        pick = i;  // the last kept token absorbs rounding at the chunk end
        run += p[i];
        if (target < run) break;
      }
    atomicMax(&si[0], static_cast<int>(pick));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int pick = si[0];
    if (pick < 0)  // rounding put the target past the last chunk: take the last kept token
      for (int64_t i = V - 1; i >= 0; --i)
        if (p[i] > 0.0f) {
          pick = static_cast<int>(i);
          break;
        }
    ids[r] = pick;
  }
}

}  // namespace

void sample(int32_t* ids, const float* logits, int64_t R, int64_t V, const SampleParams& p, float* scratch,
            cudaStream_t s) {
  if (R == 0) return;
  pdl_launch(sample_k, static_cast<unsigned>(R), kThreads, 0, s, ids, logits, V, p, scratch);
  BLOOMERY_CUDA_CHECK_LAUNCH("sample logits[" + std::to_string(R) + ", " + std::to_string(V) + "]");
}

}  // namespace bloomery::cuda
