// KV cache element loads of the attention kernels: a cache is f32 or BF16 (-ctk/-ctv), and a BF16 element is
// widened to f32 exactly as it is loaded (its bits are the float's high half), so every kernel keeps its f32
// arithmetic and only the bytes read halve.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace bloomery::cuda {

// Element i of a cache row as f32 (KV = float or __nv_bfloat16).
template <typename KV>
__device__ __forceinline__ float load_kv(const KV* p, int64_t i) {
  if constexpr (sizeof(KV) == 2)
    return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(p)[i]) << 16);
  else
    return p[i];
}

// The same through the read-only data cache (__ldg).
template <typename KV>
__device__ __forceinline__ float ldg_kv(const KV* p) {
  if constexpr (sizeof(KV) == 2)
    return __uint_as_float(static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
  else
    return __ldg(p);
}

// The two BF16 elements of a 32-bit word as f32: element 2i is the low half (little endian), 2i + 1 the high.
__device__ __forceinline__ float bf16_lo(uint32_t w) {
  return __uint_as_float(w << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t w) {
  return __uint_as_float(w & 0xFFFF0000u);
}

}  // namespace bloomery::cuda
