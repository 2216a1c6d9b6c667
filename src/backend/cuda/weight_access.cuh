// Device reads of a stored-format weight (DeviceWeight): one element, or a 16-byte unit of stored elements
// decoded to f32 in registers. Same arithmetic as dequant.cu / the CPU decoders (formats/decode.h), so every
// decoded weight is bit-identical to the CPU's.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dequant.h"
#include "backend/cuda/elements.cuh"

namespace bloomery::cuda {

// The FP8 family shares one element type; its scale differs.
__device__ __forceinline__ float fp8_scale(const DeviceWeight& w, uint64_t n, uint64_t k) {
  switch (w.format) {
    case FormatId::MXFP8:
      return e8m0_to_f32(w.block_scales[n * (w.cols / 32) + k / 32]);
    case FormatId::FP8_CHANNEL:
      return w.scale_f32[n];
    case FormatId::FP8_BLOCK:
      return w.scale_f32[(n / w.block_n) * ((w.cols + w.block_k - 1) / w.block_k) + k / w.block_k];
    default:  // FP8_TENSOR
      return w.global;
  }
}

__device__ __forceinline__ bool is_fp4(FormatId f) {
  return f == FormatId::NVFP4 || f == FormatId::W4A16_NVFP4 || f == FormatId::NVFP4_CT ||
         f == FormatId::MXFP4;
}

// Element (n, k) of the logical weight as f32.
__device__ __forceinline__ float weight_element(const DeviceWeight& w, uint64_t n, uint64_t k) {
  switch (w.format) {
    case FormatId::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(w.data)[n * w.cols + k]);
    case FormatId::F16:
      return __half2float(static_cast<const __half*>(w.data)[n * w.cols + k]);
    case FormatId::F32:
      return static_cast<const float*>(w.data)[n * w.cols + k];
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
    case FormatId::MXFP4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[n * (w.cols / 2) + k / 2];
      const float e = e2m1_to_f32((k & 1) ? (byte >> 4) : (byte & 0xFu));
      if (w.format == FormatId::MXFP4)
        return __fmul_rn(e, e8m0_to_f32(w.block_scales[n * (w.cols / 32) + k / 32]));
      return __fmul_rn(__fmul_rn(e, e4m3_to_f32(w.block_scales[n * (w.cols / 16) + k / 16])), w.global);
    }
    default: {
      const float e = e4m3_to_f32(static_cast<const uint8_t*>(w.data)[n * w.cols + k]);
      return __fmul_rn(e, fp8_scale(w, n, k));
    }
  }
}

// Table-free decoding of E2M1 and E4M3 inside units (GEMV, routed-expert decode): an element's bits are moved
// straight into an f32 whose exponent is off by a power of two, and one exact multiply by that power restores
// the value (E2M1 code c: bits (c&8)<<28 | (c&7)<<22, times 2^126; E4M3 byte b: (b&0x80)<<24 | (b&0x7F)<<20,
// times 2^120; the small codes become f32 subnormals, which the multiply scales exactly). Bit-identical to
// e2m1_to_f32 / e4m3_to_f32, whose E2M1 table lands in local memory (measured on H200: an NVFP4 decode read
// 67 GB/s with it). Exactness needs IEEE subnormals: no --use_fast_math / -ftz=true.
#if defined(__USE_FAST_MATH__)
#error "weight_access.cuh needs IEEE subnormals (no --use_fast_math / -ftz=true)"
#endif

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

// Stored formats grouped by element width. A unit is what one lane loads at once: 16 bytes, except FP4 whose
// 8-byte unit is exactly one NVFP4 scale block (16 elements), so one scale serves a unit in every format.
enum class Width : int { F32, Half, Fp8, Fp4 };

template <Width W>
struct Unit {
  static constexpr int kElems = W == Width::F32 ? 4 : (W == Width::Half ? 8 : 16);
};

// The element width of a stored format (host side: picks the unit kernel a weight takes).
inline Width width_of(FormatId f) {
  switch (f) {
    case FormatId::F32:
      return Width::F32;
    case FormatId::BF16:
    case FormatId::F16:
      return Width::Half;
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
    case FormatId::MXFP4:
      return Width::Fp4;
    default:
      return Width::Fp8;
  }
}

// Elements in one unit of a width (Unit<W>::kElems for a width known only at run time).
inline int unit_elems(Width w) {
  return w == Width::F32 ? 4 : (w == Width::Half ? 8 : 16);
}

// Decodes the unit starting at element k0 of row n (k0 a multiple of kElems, rows aligned to the unit's
// bytes) into v[kElems]. One reader for the GEMV, the routed-expert decode and their tests.
template <Width W>
__device__ __forceinline__ void decode_unit(const DeviceWeight& w, uint64_t n, uint64_t k0, float* v) {
  if constexpr (W == Width::F32) {
    const float4 q =
        __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(w.data) + n * w.cols + k0));
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else if constexpr (W == Width::Half) {
    const uint4 q =
        __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + n * w.cols + k0));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    const bool f16 = w.format == FormatId::F16;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = words[i] & 0xFFFFu, hi = words[i] >> 16;
      v[2 * i] = f16 ? __half2float(__ushort_as_half(lo)) : bf16_to_f32(lo);
      v[2 * i + 1] = f16 ? __half2float(__ushort_as_half(hi)) : bf16_to_f32(hi);
    }
  } else if constexpr (W == Width::Fp8) {
    const uint4 q =
        __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w.data) + n * w.cols + k0));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    // A 16-element unit never straddles an MX block (32) or an FP8 tile (bk is a multiple of 16 when the
    // unit path is taken), so one scale serves the unit.
    const float s = fp8_scale(w, n, k0);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = __fmul_rn(e4m3_byte(words[i / 4], i % 4), s);
  } else {
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
  }
}

}  // namespace bloomery::cuda
