// Every CUDA runtime call goes through BLOOMERY_CUDA_CHECK: a failure becomes a bloomery::Error (E_CUDA)
// naming the call, the kernel or operation and its shape. Kept free of fmt/nlohmann so .cu files stay light
// for nvcc.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace bloomery::cuda {

// Defined in cuda_check.cc (host compiler), which throws bloomery::Error.
[[noreturn]] void cuda_fail(cudaError_t err, const char* call, const std::string& what, const char* file,
                            int line);

}  // namespace bloomery::cuda

// `what` names the kernel and its shape, e.g. "dequantize NVFP4 [640, 2560]".
#define BLOOMERY_CUDA_CHECK(call, what)                                              \
  do {                                                                               \
    cudaError_t bloomery_err_ = (call);                                              \
    if (bloomery_err_ != cudaSuccess)                                                \
      ::bloomery::cuda::cuda_fail(bloomery_err_, #call, (what), __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches launch-configuration errors at once.
#define BLOOMERY_CUDA_CHECK_LAUNCH(what) BLOOMERY_CUDA_CHECK(cudaGetLastError(), (what))
