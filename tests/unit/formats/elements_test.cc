// Element decoders (formats.md §5) against the spec's formulas evaluated independently with ldexp, and the
// format table's rows (§6 cut units).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "formats/elements.h"
#include "formats/format_table.h"

namespace bloomery {
namespace {

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

TEST(Elements, E2m1MatchesSpecFormula) {
  for (int c = 0; c < 16; ++c) {
    const int e = (c >> 1) & 3, m = c & 1;
    float v = e == 0 ? 0.5f * m : std::ldexp(1.0f + m / 2.0f, e - 1);
    if (c & 8) v = -v;
    EXPECT_EQ(bits(elem::e2m1(uint8_t(c))), bits(v)) << c;
    EXPECT_EQ(bits(elem::e2m1(uint8_t(0xF0 | c))), bits(v)) << "high bits ignored";
  }
}

TEST(Elements, E4m3MatchesSpecFormula) {
  for (int b = 0; b < 256; ++b) {
    const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) {
      EXPECT_EQ(bits(elem::e4m3(uint8_t(b))), (uint32_t(s) << 31) | 0x7FC00000u) << b;
      EXPECT_TRUE(elem::e4m3_is_nan(uint8_t(b)));
      continue;
    }
    EXPECT_FALSE(elem::e4m3_is_nan(uint8_t(b)));
    const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    EXPECT_EQ(bits(elem::e4m3(uint8_t(b))), bits(float(s ? -v : v))) << b;
  }
  EXPECT_EQ(elem::e4m3(0x7E), 448.0f);
  EXPECT_EQ(elem::e4m3(0x01), 0.001953125f);
}

TEST(Elements, E5m2MatchesIeeeLikeFormula) {
  for (int b = 0; b < 256; ++b) {
    const int s = b >> 7, e = (b >> 2) & 31, m = b & 3;
    const float got = elem::e5m2(uint8_t(b));
    if (e == 31) {
      EXPECT_EQ(bits(got), (uint32_t(s) << 31) | 0x7F800000u | (uint32_t(m) << 21))
          << b;  // Inf, NaN payloads
      continue;
    }
    const double v = e == 0 ? std::ldexp(m / 4.0, -14) : std::ldexp(1.0 + m / 4.0, e - 15);
    EXPECT_EQ(bits(got), bits(float(s ? -v : v))) << b;
  }
}

TEST(Elements, E8m0IsPowerOfTwoAndByteZeroIsExactSubnormal) {
  for (int b = 0; b < 255; ++b) EXPECT_EQ(elem::e8m0(uint8_t(b)), std::ldexp(1.0f, b - 127)) << b;
  EXPECT_EQ(std::fpclassify(elem::e8m0(0)), FP_SUBNORMAL);
  EXPECT_TRUE(std::isnan(elem::e8m0(0xFF)));
}

TEST(Elements, F16AndBf16WidenExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float got = elem::f16(uint16_t(h));
    if (e == 31) {
      ASSERT_EQ(bits(got), (uint32_t(s) << 31) | 0x7F800000u | (uint32_t(m) << 13)) << h;
      continue;
    }
    const double v = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15);
    ASSERT_EQ(bits(got), bits(float(s ? -v : v))) << h;
  }
  EXPECT_EQ(elem::bf16(0x3F80), 1.0f);
  EXPECT_EQ(bits(elem::bf16(0xFFC1)), 0xFFC10000u);
  const uint8_t le[4] = {0x00, 0x00, 0x80, 0x3F};
  EXPECT_EQ(elem::load_f32le(le), 1.0f);
}

TEST(FormatTable, EveryFormatHasItsRowAndCutUnits) {
  for (size_t i = 0; i < size_t(FormatId::kCount); ++i) {
    const FormatInfo& f = format_info(FormatId(i));
    EXPECT_EQ(f.id, FormatId(i));
    EXPECT_NE(f.validate, nullptr);
    EXPECT_NE(f.decode, nullptr);
    FormatId back;
    ASSERT_TRUE(format_from_name(f.name, &back));
    EXPECT_EQ(back, f.id);
  }
  EXPECT_EQ(format_info(FormatId::NVFP4).tp_row_unit, 1);
  EXPECT_EQ(format_info(FormatId::NVFP4).tp_col_unit, 16);
  EXPECT_EQ(format_info(FormatId::NVFP4_CT).tp_col_unit, 16);
  EXPECT_EQ(format_info(FormatId::MXFP4).tp_col_unit, 32);
  EXPECT_EQ(format_info(FormatId::MXFP8).tp_col_unit, 32);
  EXPECT_EQ(format_info(FormatId::FP8_BLOCK).tp_row_unit, 0);  // whole tiles: from the record
  EXPECT_EQ(format_info(FormatId::BF16).tp_col_unit, 1);
  EXPECT_EQ(format_info(FormatId::NVFP4).bits_per_element, 4);
  EXPECT_EQ(format_info(FormatId::MXFP8).bits_per_element, 8);
  EXPECT_FALSE(format_info(FormatId::F32).quantized);
  FormatId unused;
  EXPECT_FALSE(format_from_name("NVFP5", &unused));
}

}  // namespace
}  // namespace bloomery
