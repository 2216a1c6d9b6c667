// Bit-exact scalar decoders of the element formats (formats.md §5) to f32: table lookups for the 4/8-bit
// codes. NaN policy (shared with reference/formats/elements.py so decodes compare bit-exactly):
//   E4M3 0x7F/0xFF and E8M0 0xFF decode to the quiet NaN 0x7FC00000 with the code's sign bit;
//   E5M2 and F16 widen their bits exactly (payload shifted left 13, quiet bit untouched); BF16 is a 16-bit
//   shift.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace bloomery::elem {

namespace detail {

constexpr uint32_t kQuietNan = 0x7FC00000u;

// IEEE binary16 bits to binary32 bits, exactly (subnormals normalised, Inf/NaN widened with payload << 13).
constexpr uint32_t f16_bits_to_f32_bits(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return sign | 0x7F800000u | (man << 13);
  if (exp != 0) return sign | ((exp - 15 + 127) << 23) | (man << 13);
  if (man == 0) return sign;
  // Subnormal half: value = man · 2^-24; normalise so the leading 1 sits at bit 10.
  int e = -14;
  while ((man & 0x400u) == 0) {
    man <<= 1;
    --e;
  }
  return sign | (uint32_t(e + 127) << 23) | ((man & 0x3FFu) << 13);
}

// E4M3fn bits to f32 bits: s eeee mmm, bias 7, no Inf, NaN only at S.1111.111.
constexpr uint32_t e4m3_bits_to_f32_bits(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xFu;
  uint32_t man = b & 0x7u;
  if (exp == 0xF && man == 0x7) return sign | kQuietNan;
  if (exp != 0) return sign | ((exp - 7 + 127) << 23) | (man << 20);
  if (man == 0) return sign;
  int e = -6;  // subnormal: (m/8) · 2^-6
  while ((man & 0x8u) == 0) {
    man <<= 1;
    --e;
  }
  return sign | (uint32_t(e + 127) << 23) | ((man & 0x7u) << 20);
}

// E8M0: 2^(b-127) for b = 0..254 (b = 0 is the subnormal 2^-127), 0xFF is NaN.
constexpr uint32_t e8m0_bits_to_f32_bits(uint8_t b) {
  if (b == 0xFF) return kQuietNan;
  if (b == 0) return 0x00400000u;  // 2^-127: subnormal with only mantissa bit 22 set
  return uint32_t(b) << 23;
}

template <typename F>
constexpr std::array<float, 256> make_table(F bits_of) {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = std::bit_cast<float>(bits_of(uint8_t(i)));
  return t;
}

inline constexpr std::array<float, 16> kE2m1{0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
inline constexpr std::array<float, 256> kE4m3 = make_table(e4m3_bits_to_f32_bits);
inline constexpr std::array<float, 256> kE5m2 =
    make_table([](uint8_t b) { return f16_bits_to_f32_bits(uint16_t(b) << 8); });
inline constexpr std::array<float, 256> kE8m0 = make_table(e8m0_bits_to_f32_bits);

}  // namespace detail

// E2M1 (FP4) code in the low 4 bits of `code`.
inline float e2m1(uint8_t code) {
  return detail::kE2m1[code & 0xF];
}
inline float e4m3(uint8_t b) {
  return detail::kE4m3[b];
}
inline float e5m2(uint8_t b) {
  return detail::kE5m2[b];
}
inline float e8m0(uint8_t b) {
  return detail::kE8m0[b];
}
inline float bf16(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}
// f32 -> BF16 bits, rounded to nearest even (as __float2bfloat16_rn and torch); NaN stays a quiet NaN.
inline uint16_t bf16_rne(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float f16(uint16_t bits) {
  return std::bit_cast<float>(detail::f16_bits_to_f32_bits(bits));
}

// The whole 256-entry tables, for decoders that index them directly.
inline const float* e4m3_table() {
  return detail::kE4m3.data();
}
inline const float* e8m0_table() {
  return detail::kE8m0.data();
}
inline const float* e2m1_table() {
  return detail::kE2m1.data();
}

// E4M3 NaN codes (0x7F, 0xFF).
constexpr bool e4m3_is_nan(uint8_t b) {
  return (b & 0x7F) == 0x7F;
}

// Little-endian loads from unaligned storage.
inline uint16_t load_u16le(const uint8_t* p) {
  return uint16_t(p[0] | (p[1] << 8));
}
inline uint32_t load_u32le(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline float load_f32le(const uint8_t* p) {
  return std::bit_cast<float>(load_u32le(p));
}

}  // namespace bloomery::elem
