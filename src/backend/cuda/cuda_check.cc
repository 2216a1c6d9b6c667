#include "backend/cuda/cuda_check.h"

#include "core/error.h"

namespace bloomery::cuda {

void cuda_fail(cudaError_t err, const char* call, const std::string& what, const char* file, int line) {
  raise("E_CUDA", {std::string(file) + ":" + std::to_string(line), what, call}, "cudaSuccess",
        std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace bloomery::cuda
