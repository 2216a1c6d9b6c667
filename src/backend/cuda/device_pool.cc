// DevicePool: size-class free lists over cudaMalloc (see device_pool.h for why).
#include "backend/cuda/device_pool.h"

#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_check.h"

namespace bloomery::cuda {

size_t DevicePool::size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= (64u << 10)) return (bytes + 255) / 256 * 256;
  // Above 64 KiB: four classes per power of two (waste ≤ 25 %), rounded to 2 MiB once large.
  size_t p = 1;
  while (p * 2 < bytes) p *= 2;
  const size_t step = p / 4;
  size_t cls = (bytes + step - 1) / step * step;
  if (cls >= (8u << 20)) cls = (cls + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  return cls;
}

std::shared_ptr<void> DevicePool::get(size_t bytes, const std::string& what) {
  const size_t cls = size_class(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= cls;
    }
    live_ += cls;
  }
  if (!p) {
    cudaError_t err = cudaMalloc(&p, cls);
    if (err == cudaErrorMemoryAllocation) {
      // Give the cache back and try once more before failing.
      (void)cudaGetLastError();
      trim();
      err = cudaMalloc(&p, cls);
    }
    if (err != cudaSuccess) {
      std::lock_guard<std::mutex> lock(mu_);
      live_ -= cls;
    }
    BLOOMERY_CUDA_CHECK(err, what + " (" + std::to_string(cls) + " bytes)");
  }
  std::weak_ptr<bool> alive = alive_;
  return std::shared_ptr<void>(p, [this, cls, alive](void* q) {
    if (alive.lock())
      put(q, cls);
    else
      cudaFree(q);
  });
}

void DevicePool::put(void* p, size_t cls) {
  std::lock_guard<std::mutex> lock(mu_);
  free_[cls].push_back(p);
  cached_ += cls;
  live_ -= cls;
}

void DevicePool::trim() {
  std::map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_);
    cached_ = 0;
  }
  for (auto& [cls, list] : blocks)
    for (void* p : list) cudaFree(p);
}

size_t DevicePool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

size_t DevicePool::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

DevicePool::~DevicePool() {
  alive_.reset();
  trim();
}

}  // namespace bloomery::cuda
