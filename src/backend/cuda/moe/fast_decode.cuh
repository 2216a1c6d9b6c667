// Table-free decoding of FP4 (E2M1) and FP8 (E4M3) units for the routed-expert decode kernels, bit-identical
// to weight_access.cuh's decode_unit (and so to the CPU decoders). decode_unit's E2M1 table (kMag) lands in
// local memory, and its E4M3 path branches and converts integers; measured on H200 the NVFP4 decode MoE read
// 67 GB/s with it. Here an element's bits are moved straight into an f32 whose exponent is off by a power of
// two, and one exact multiply by that power restores the value (E2M1 code c: bits (c&8)<<28 | (c&7)<<22,
// times 2^126; E4M3 byte b: (b&0x80)<<24 | (b&0x7F)<<20, times 2^120; the small codes become f32
// subnormals, which the multiply scales exactly). The scale products then follow decode_unit's order.
#pragma once

#include "backend/cuda/weight_access.cuh"

// Exactness needs subnormal inputs kept: flush-to-zero would zero E2M1 0.5 and the E4M3 subnormals.
#if defined(__USE_FAST_MATH__)
#error "fast_decode.cuh needs IEEE subnormals (no --use_fast_math / -ftz=true)"
#endif

namespace bloomery::cuda {

// Nibble i (0..7) of `word` as f32, exactly e2m1_to_f32.
__device__ __forceinline__ float e2m1_nibble(uint32_t word, int i) {
  const uint32_t c = word >> (4 * i);
  return __fmul_rn(__uint_as_float(((c & 8u) << 28) | ((c & 7u) << 22)), 0x1p126f);
}

// Byte i (0..3) of `word` as f32, exactly e4m3_to_f32 (its one NaN code included).
__device__ __forceinline__ float e4m3_byte(uint32_t word, int i) {
  const uint32_t b = (word >> (8 * i)) & 0xFFu, sign = (b & 0x80u) << 24;
  const float v = __fmul_rn(__uint_as_float(sign | ((b & 0x7Fu) << 20)), 0x1p120f);
  return (b & 0x7Fu) == 0x7Fu ? __uint_as_float(sign | 0x7FC00000u) : v;
}

// decode_unit with the table-free FP4 / FP8 element decoders; F32 and half widths are decode_unit's.
template <Width W>
__device__ __forceinline__ void decode_unit_fast(const DeviceWeight& w, uint64_t n, uint64_t k0, float* v) {
  if constexpr (W == Width::Fp8) {
    const uint4 q =
        __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w.data) + n * w.cols + k0));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    const float s = fp8_scale(w, n, k0);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = __fmul_rn(e4m3_byte(words[i / 4], i % 4), s);
  } else if constexpr (W == Width::Fp4) {
    const uint2 q = __ldg(
        reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(w.data) + n * (w.cols / 2) + k0 / 2));
    const uint32_t words[2] = {q.x, q.y};
    if (w.format == FormatId::MXFP4) {
      const float s = e8m0_to_f32(w.block_scales[n * (w.cols / 32) + k0 / 32]);
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = __fmul_rn(e2m1_nibble(words[i / 8], i % 8), s);
    } else {
      const float s = e4m3_to_f32(w.block_scales[n * (w.cols / 16) + k0 / 16]);
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = __fmul_rn(__fmul_rn(e2m1_nibble(words[i / 8], i % 8), s), w.global);
    }
  } else {
    decode_unit<W>(w, n, k0, v);
  }
}

}  // namespace bloomery::cuda
