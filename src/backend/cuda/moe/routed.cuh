// The routed-expert kernels' check of a pair's expert id (moe_decode.cu, moe_decode_tc.cu): an id outside
// [0, E) or an expert that is not loaded (data == nullptr) cannot raise without a host sync, so its rows get
// NaN.
#pragma once

#include <cstdint>

#include "backend/cuda/dequant.h"

namespace bloomery::cuda {

__device__ __forceinline__ bool routed_ok(const DeviceWeight* tab, int64_t E, int32_t e) {
  return e >= 0 && e < E && tab[e].data != nullptr;
}

}  // namespace bloomery::cuda
