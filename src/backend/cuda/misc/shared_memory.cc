#include "backend/cuda/misc/shared_memory.h"

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <utility>

#include "backend/cuda/cuda_check.h"

namespace bloomery::cuda {

void opt_in_shared_memory(const void* kernel, int bytes, const std::string& what) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;  // (kernel, device) pairs already configured
  int dev = 0;
  BLOOMERY_CUDA_CHECK(cudaGetDevice(&dev), what + ": current device");
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({kernel, dev})) return;
  BLOOMERY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                      what + ": shared memory attribute (" + std::to_string(bytes) + " bytes)");
  done.insert({kernel, dev});
}

}  // namespace bloomery::cuda
