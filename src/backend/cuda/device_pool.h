// A caching allocator for activation tensors: freed blocks go back to a free list by size class and are
// handed out again without cudaMalloc/cudaFree (each of which synchronises the device and costs tens of µs; a
// decode step allocates hundreds of small tensors). All users run on one stream, so stream order makes reuse
// safe: a block freed on the host while kernels still read it is only rewritten by kernels queued after them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace bloomery::cuda {

class DevicePool {
 public:
  DevicePool() = default;
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  ~DevicePool();

  // A block of at least `bytes` (rounded up to the size class), freed back to the pool when the last owner
  // drops it. The pool must outlive the blocks (the backend owns both; tensors are dropped first).
  std::shared_ptr<void> get(size_t bytes, const std::string& what);

  // Returns every cached free block to the device (cudaFree). Live blocks are untouched.
  void trim();

  size_t cached_bytes() const;  // free blocks held
  size_t live_bytes() const;    // blocks handed out and not yet returned

  // Size classes: 256-byte steps up to 64 KiB, then powers of two split in four up to 2 MiB-aligned sizes.
  static size_t size_class(size_t bytes);

 private:
  void put(void* p, size_t cls);

  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0, live_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // blocks outliving the pool free themselves
};

}  // namespace bloomery::cuda
