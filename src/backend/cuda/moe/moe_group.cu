// Prompt-path grouping of routed (token, slot) pairs by expert, all on the card: a histogram of the routed
// ids, an exclusive scan into per-expert row offsets, the placement of every pair into its expert's rows,
// and the gather of the x rows in that grouped order (the layout grouped_gemm reads). Integer atomics only;
// the values computed later do not depend on the order inside a group.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/moe/moe_kernels.h"

namespace bloomery::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;

__global__ void count_k(const int32_t* __restrict__ ids, int64_t P, int64_t E, int32_t* counts) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= P) return;
  const int32_t e = ids[p];
  if (e >= 0 && e < E) atomicAdd(counts + e, 1);
}

// One block: each thread sums a run of consecutive counts, the block scans the run totals, then each thread
// writes its run's exclusive offsets. offsets[E] = total.
__global__ void __launch_bounds__(kScanThreads)
    scan_k(const int32_t* __restrict__ counts, int64_t E, int32_t* __restrict__ offsets) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ int32_t part[kScanThreads];
  const int64_t per = (E + kScanThreads - 1) / kScanThreads;
  const int64_t b = threadIdx.x * per, end = b + per < E ? b + per : E;
  int32_t sum = 0;
  for (int64_t i = b; i < end; ++i) sum += counts[i];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int o = 1; o < kScanThreads; o <<= 1) {  // inclusive Hillis–Steele scan of the run totals
    const int32_t v = threadIdx.x >= o ? part[threadIdx.x - o] : 0;
    __syncthreads();
    part[threadIdx.x] += v;
    __syncthreads();
  }
  int32_t run = threadIdx.x ? part[threadIdx.x - 1] : 0;
  for (int64_t i = b; i < end; ++i) {
    offsets[i] = run;
    run += counts[i];
  }
  if (threadIdx.x == kScanThreads - 1) offsets[E] = part[kScanThreads - 1];
}

__global__ void place_k(const int32_t* __restrict__ ids, int64_t P, int k, int64_t E,
                        const int32_t* __restrict__ offsets, int32_t* cursor, int32_t* __restrict__ rows,
                        int32_t* __restrict__ pos) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= P) return;
  const int32_t e = ids[p];
  if (e < 0 || e >= E) {
    pos[p] = -1;  // the combine writes NaN for it
    return;
  }
  const int32_t at = offsets[e] + atomicAdd(cursor + e, 1);
  rows[at] = static_cast<int32_t>(p / k);
  pos[p] = at;
}

__global__ void gather_k(float* __restrict__ xs, const float* __restrict__ x,
                         const int32_t* __restrict__ rows, const int32_t* __restrict__ offsets, int64_t E,
                         int64_t D) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t i = blockIdx.x;
  if (i >= offsets[E]) return;
  const float* src = x + static_cast<int64_t>(rows[i]) * D;
  float* dst = xs + i * D;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) dst[c] = src[c];
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

}  // namespace

void moe_group(const int32_t* ids, int64_t P, int k, int64_t E, int32_t* counts, int32_t* cursor,
               int32_t* offsets, int32_t* rows, int32_t* pos, cudaStream_t s) {
  const std::string what = "moe_group pairs " + std::to_string(P) + " experts " + std::to_string(E);
  BLOOMERY_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(E) * 4, s), what);
  BLOOMERY_CUDA_CHECK(cudaMemsetAsync(cursor, 0, static_cast<size_t>(E) * 4, s), what);
  if (P > 0) {
    pdl_launch(count_k, blocks_for(P), kThreads, 0, s, ids, P, E, counts);
    BLOOMERY_CUDA_CHECK_LAUNCH(what + " (count)");
  }
  pdl_launch(scan_k, 1, kScanThreads, 0, s, counts, E, offsets);
  BLOOMERY_CUDA_CHECK_LAUNCH(what + " (scan)");
  if (P > 0) {
    pdl_launch(place_k, blocks_for(P), kThreads, 0, s, ids, P, k, E, offsets, cursor, rows, pos);
    BLOOMERY_CUDA_CHECK_LAUNCH(what + " (place)");
  }
}

void moe_gather_rows(float* xs, const float* x, const int32_t* rows, const int32_t* offsets, int64_t E,
                     int64_t P, int64_t D, cudaStream_t s) {
  if (P == 0 || D == 0) return;
  pdl_launch(gather_k, static_cast<unsigned>(P), kThreads, 0, s, xs, x, rows, offsets, E, D);
  BLOOMERY_CUDA_CHECK_LAUNCH("moe_gather_rows pairs " + std::to_string(P) + " D " + std::to_string(D));
}

}  // namespace bloomery::cuda
