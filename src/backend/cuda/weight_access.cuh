// Device reads of a stored-format weight (DeviceWeight): one element, or a 16-byte unit of stored elements
// decoded to f32 in registers. Same arithmetic as dequant.cu / the CPU decoders (formats/decode.h), so every
// decoded weight is bit-identical to the CPU's.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

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
      // 32-bit divisions (row, column and tile sizes fit): a 64-bit divide is a long subroutine per unit.
      return w.scale_f32[static_cast<uint64_t>(static_cast<uint32_t>(n) / static_cast<uint32_t>(w.block_n)) *
                             ((static_cast<uint32_t>(w.cols) + w.block_k - 1) /
                              static_cast<uint32_t>(w.block_k)) +
                         static_cast<uint32_t>(k) / static_cast<uint32_t>(w.block_k)];
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

// Two E4M3 bytes (the lower k in the low byte of `pair`) as f32 through one f16x2 conversion: exact, since
// every E4M3 value is an f16 (the NaN code stays a NaN). Used where a unit is read a word at a time (the
// one-row GEMV, the tensor-core GEMV's bf16 pairs).
__device__ __forceinline__ float2 e4m3x2_to_f32(uint32_t pair) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Four E4M3 bytes (the lowest k in the low byte) as f32, exactly.
__device__ __forceinline__ float4 e4m3x4_to_f32(uint32_t word) {
  const float2 a = e4m3x2_to_f32(word), b = e4m3x2_to_f32(word >> 16);
  return make_float4(a.x, a.y, b.x, b.y);
}

// Four BF16 values (the lowest k in the low half of q.x) as f32.
__device__ __forceinline__ float4 bf16x4_to_f32(uint2 q) {
  return make_float4(__uint_as_float(q.x << 16), __uint_as_float(q.x & 0xFFFF0000u),
                     __uint_as_float(q.y << 16), __uint_as_float(q.y & 0xFFFF0000u));
}

// Stored formats grouped by element width. A unit is what one lane loads at once: 16 bytes, except FP4 whose
// 8-byte unit is exactly one NVFP4 scale block (16 elements), so one scale serves a unit in every format.
enum class Width : int { F32, Half, Fp8, Fp4 };

template <Width W>
struct Unit {
  static constexpr int kElems = W == Width::F32 ? 4 : (W == Width::Half ? 8 : 16);
};

// Calls f(std::integral_constant<Width, W>{}) for the run-time width W: the one place a width becomes the
// template argument of a unit kernel.
template <typename F>
inline void with_width(Width w, F&& f) {
  switch (w) {
    case Width::F32:
      return f(std::integral_constant<Width, Width::F32>{});
    case Width::Half:
      return f(std::integral_constant<Width, Width::Half>{});
    case Width::Fp8:
      return f(std::integral_constant<Width, Width::Fp8>{});
    case Width::Fp4:
      return f(std::integral_constant<Width, Width::Fp4>{});
  }
}

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

// A unit as loaded, before decoding (16 bytes; 8 for FP4), and its scale: the FP8 family's scale, the FP4
// block scale (E4M3 for NVFP4, E8M0 for MXFP4; NVFP4's f32 global is not in it), 1 for F32 / half widths.
// load_unit + unscaled_unit are the one unit decoder of every format: decode_unit (GEMV variant 1, routed
// experts variant 1, the decode test) applies the scales per element, GEMV and routed-expert variant 2 apply
// them to partial sums.
template <Width W>
struct RawUnit {
  using Bits = std::conditional_t<W == Width::Fp4, uint2, uint4>;
  Bits q;
  float s;
};

// The unit starting at element k0 of row n (k0 a multiple of kElems, rows aligned to the unit's bytes).
template <Width W>
__device__ __forceinline__ RawUnit<W> load_unit(const DeviceWeight& w, uint64_t n, uint64_t k0) {
  RawUnit<W> r;
  if constexpr (W == Width::F32) {
    r.q = __ldg(reinterpret_cast<const uint4*>(static_cast<const float*>(w.data) + n * w.cols + k0));
    r.s = 1.0f;
  } else if constexpr (W == Width::Half) {
    r.q = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + n * w.cols + k0));
    r.s = 1.0f;
  } else if constexpr (W == Width::Fp8) {
    r.q = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w.data) + n * w.cols + k0));
    // A 16-element unit never straddles an MX block (32) or an FP8 tile (bk is a multiple of 16 when the
    // unit path is taken), so one scale serves the unit.
    r.s = fp8_scale(w, n, k0);
  } else {
    r.q = __ldg(
        reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(w.data) + n * (w.cols / 2) + k0 / 2));
    r.s = w.format == FormatId::MXFP4 ? e8m0_to_f32(w.block_scales[n * (w.cols / 32) + k0 / 32])
                                      : e4m3_to_f32(w.block_scales[n * (w.cols / 16) + k0 / 16]);
  }
  return r;
}

// The unit's elements before its scale: exact values of the stored element codes.
template <Width W>
__device__ __forceinline__ void unscaled_unit(const RawUnit<W>& r, bool f16, float* v) {
  if constexpr (W == Width::F32) {
    v[0] = __uint_as_float(r.q.x), v[1] = __uint_as_float(r.q.y);
    v[2] = __uint_as_float(r.q.z), v[3] = __uint_as_float(r.q.w);
  } else if constexpr (W == Width::Half) {
    const uint32_t words[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = words[i] & 0xFFFFu, hi = words[i] >> 16;
      v[2 * i] = f16 ? __half2float(__ushort_as_half(lo)) : bf16_to_f32(lo);
      v[2 * i + 1] = f16 ? __half2float(__ushort_as_half(hi)) : bf16_to_f32(hi);
    }
  } else if constexpr (W == Width::Fp8) {
    const uint32_t words[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = e4m3_byte(words[i / 4], i % 4);
  } else {
    const uint32_t words[2] = {r.q.x, r.q.y};
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = e2m1_nibble(words[i / 8], i % 8);
  }
}

// What multiplies a row's sum of scaled partial sums in variant 2: NVFP4's f32 global, else 1.
template <Width W>
__device__ __forceinline__ float row_post_scale(const DeviceWeight& w) {
  return W == Width::Fp4 && w.format != FormatId::MXFP4 ? w.global : 1.0f;
}

// Decodes the unit starting at element k0 of row n into v[kElems], every element fully scaled in the CPU's
// order (element × block scale, then × NVFP4's global, each rounded): bit-identical to weight_element.
template <Width W>
__device__ __forceinline__ void decode_unit(const DeviceWeight& w, uint64_t n, uint64_t k0, float* v) {
  const RawUnit<W> r = load_unit<W>(w, n, k0);
  unscaled_unit<W>(r, w.format == FormatId::F16, v);
  if constexpr (W == Width::Fp8 || W == Width::Fp4) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = __fmul_rn(v[i], r.s);
  }
  if constexpr (W == Width::Fp4) {
    if (w.format != FormatId::MXFP4) {
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = __fmul_rn(v[i], w.global);
    }
  }
}

}  // namespace bloomery::cuda
