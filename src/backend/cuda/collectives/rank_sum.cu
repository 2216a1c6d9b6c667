// The loopback all-reduce's sum: every rank's partial read straight from its buffer (all ranks share the
// device), added in rank order so the result is the CPU ranks' bytes. Hand-written: NCCL cannot run two
// ranks on one GPU, and this is one streaming add.
#include "backend/cuda/collectives/device_collective.h"
#include "backend/cuda/cuda_check.h"

#include <algorithm>

namespace bloomery::cuda {
namespace {

__global__ void rank_sum_kernel(float* __restrict__ out, RankInputs in, int ranks, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float s = in.p[0][i];
    for (int r = 1; r < ranks; ++r) s += in.p[r][i];
    out[i] = s;
  }
}

}  // namespace

void launch_rank_sum(float* out, RankInputs in, int ranks, size_t n, cudaStream_t s) {
  if (n == 0) return;
  const int threads = 256;
  const int blocks = int(std::min<size_t>((n + threads - 1) / threads, 1024));
  // A plain launch: its inputs come from other ranks' streams (event waits), not from a kernel before it.
  rank_sum_kernel<<<blocks, threads, 0, s>>>(out, in, ranks, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("tensor-parallel loopback sum");
}

}  // namespace bloomery::cuda
