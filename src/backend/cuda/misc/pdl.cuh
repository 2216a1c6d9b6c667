// Programmatic dependent launch (sm_90 and later): a kernel launched through pdl_launch() may start while the
// kernel before it on the stream is still running, so its launch, block scheduling and any reads of immutable
// data (weights) overlap the previous kernel's tail instead of following it. In a decode step of ~2,000 small
// kernels that launch gap is a large part of the step (docs/performance.md).
//
// The contract, for every kernel launched through pdl_launch(): it calls pdl_wait() before it reads anything
// an earlier kernel may have written and before it writes anything (pdl_wait returns once the previous kernel
// has finished and its writes are visible); only index arithmetic and loads of weights may come before it.
// Right after pdl_wait it calls pdl_launch_dependents(), which lets the next kernel launch: at most one
// kernel waits ahead of the running one. Kernels launched with <<<>>> are unaffected (pdl_wait is then a
// no-op).
//
// BLOOMERY_CUDA_PDL=0 launches them without the attribute (stream order); bench --ab pdl compares.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/kernels.h"  // pdl_enabled

namespace bloomery::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...) with the programmatic-serialization attribute when enabled. A
// launch failure is left in the runtime's last error, as <<<>>> leaves it, for the caller's
// BLOOMERY_CUDA_CHECK_LAUNCH.
template <typename... Params, typename... Args>
void pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(std::forward<Args>(args))...);
}

}  // namespace bloomery::cuda
