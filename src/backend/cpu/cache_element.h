// A cache element as f32 on the CPU engine: f32 caches as they are, BF16 ones (-ctk/-ctv) widened exactly.
// Shared by the attention over K/V and the MLA attention over GLM's latent.
#pragma once

#include <cstdint>

#include "formats/elements.h"

namespace bloomery::cpu {

inline float cache_at(const float* p, int64_t i) {
  return p[i];
}
inline float cache_at(const uint16_t* p, int64_t i) {
  return elem::bf16(p[i]);
}

}  // namespace bloomery::cpu
