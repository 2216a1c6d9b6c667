// Device-side element decoders, bit-identical to src/formats/elements.h (the CPU reference).
#pragma once

#include <cstdint>

namespace bloomery::cuda {

__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
  // Same table as formats.md §5.2: 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives.
  constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[code & 7u];
  return (code & 8u) ? -m : m;
}

__device__ __forceinline__ float e4m3_to_f32(uint32_t b) {
  const uint32_t sign = (b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xFu;
  const uint32_t man = b & 7u;
  if (exp == 0xFu && man == 7u) return __uint_as_float(sign | 0x7FC00000u);  // the only NaN code
  if (exp == 0) {
    // subnormal: man/8 · 2^-6, exact in f32
    const float v = static_cast<float>(man) * 0.001953125f;
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((exp + 120u) << 23) | (man << 20));
}

__device__ __forceinline__ float e8m0_to_f32(uint32_t b) {
  if (b == 0xFFu) return __uint_as_float(0x7FC00000u);
  if (b == 0) return __uint_as_float(0x00400000u);  // 2^-127 is an f32 subnormal
  return __uint_as_float(b << 23);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

}  // namespace bloomery::cuda
