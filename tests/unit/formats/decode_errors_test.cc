// Per-format validation of stored bytes (formats.md §6.2.2, §6.3, §6.5–§6.7) with hand-made WeightBytes, and
// decodes of hand-computed values (nibble order, partial FP8 tiles, CT's divisor).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/decode.h"
#include "formats_test_util.h"

namespace bloomery {
namespace {

using testing::error_id;

std::vector<uint8_t> f32_bytes(float v) {
  std::vector<uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}

// An NVFP4 weight of N rows × K columns whose bytes live in this object.
struct Nvfp4 {
  std::vector<uint8_t> main, scales, global, input;
  WeightBytes wb;
  Nvfp4(uint64_t N, uint64_t K, FormatId f = FormatId::NVFP4, float g = 0.5f)
      : main(N * K / 2, 0x21), scales(N * K / 16, 0x38), global(f32_bytes(g)) {
    wb.format = f;
    wb.main_dtype = DType::U8;
    wb.scale_dtype = DType::F8_E4M3;
    wb.global_dtype = DType::F32;
    wb.rows = N;
    wb.cols = K;
    sync();
  }
  void sync() {
    wb.main = main;
    wb.block_scale = scales;
    wb.global_scale = global;
    wb.input_scale = input;
  }
  std::string validate(Warnings& w) {
    sync();
    return error_id([&] { validate_weight_bytes(wb, {"f", "t", {}}, w); });
  }
  std::string validate() {
    Warnings w;
    return validate(w);
  }
};

TEST(DecodeErrors, Nvfp4ScaleNanAndWarnings) {
  Nvfp4 n(4, 32);
  EXPECT_EQ(n.validate(), "no error");
  n.scales[3] = 0x7F;
  EXPECT_EQ(n.validate(), "E_NVFP4_SCALE_NAN");
  n.scales[3] = 0xFF;
  EXPECT_EQ(n.validate(), "E_NVFP4_SCALE_NAN");
  n.scales[3] = 0x00;
  n.scales[4] = 0xB8;
  Warnings w;
  EXPECT_EQ(n.validate(w), "no error");
  EXPECT_EQ(w.count("W_NVFP4_SCALE_ZERO"), 1u);
  EXPECT_EQ(w.count("W_NVFP4_SCALE_NEGATIVE"), 1u);
}

TEST(DecodeErrors, Nvfp4Globals) {
  for (float bad :
       {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Nvfp4 n(2, 16, FormatId::NVFP4, bad);
    EXPECT_EQ(n.validate(), "E_NVFP4_GLOBAL_NONFINITE") << bad;
    Nvfp4 ct(2, 16, FormatId::NVFP4_CT, bad);
    EXPECT_EQ(ct.validate(), "E_CT_GLOBAL_NONPOSITIVE") << bad;
  }
  Nvfp4 ct(2, 16, FormatId::NVFP4_CT, 1e-45f);  // 1/g overflows f32
  EXPECT_EQ(ct.validate(), "E_CT_GLOBAL_NONPOSITIVE");
  Nvfp4 n(2, 16);
  n.input = f32_bytes(0.0f);
  EXPECT_EQ(n.validate(), "E_NVFP4_GLOBAL_NONFINITE");
  n.wb.format = FormatId::W4A16_NVFP4;  // input_scale ignored (§6.4)
  EXPECT_EQ(n.validate(), "no error");
  n.wb.format = FormatId::NVFP4;
  n.input = {0, 0, 0x80, 0x3F, 0, 0, 0x80, 0x3F};  // two elements
  EXPECT_EQ(n.validate(), "E_NVFP4_GLOBAL_SHAPE");
}

TEST(DecodeErrors, Nvfp4Layout) {
  Nvfp4 n(2, 32);
  n.scales.pop_back();
  EXPECT_EQ(n.validate(), "E_NVFP4_SCALE_SHAPE");
  Nvfp4 k(2, 24);
  EXPECT_EQ(k.validate(), "E_NVFP4_K_ALIGN");
  Nvfp4 d(2, 32);
  d.wb.main_dtype = DType::F32;
  EXPECT_EQ(d.validate(), "E_NVFP4_WEIGHT_DTYPE");
  d.wb.main_dtype = DType::U8;
  d.wb.scale_dtype = DType::U8;
  EXPECT_EQ(d.validate(), "E_NVFP4_SCALE_DTYPE");
  Nvfp4 ct(2, 32, FormatId::NVFP4_CT);
  ct.main.push_back(0);
  EXPECT_EQ(ct.validate(), "E_CT_NVFP4_WEIGHT_SHAPE");
  Nvfp4 g(2, 32);
  g.global.clear();
  EXPECT_EQ(g.validate(), "E_NVFP4_GLOBAL_SHAPE");
}

TEST(DecodeErrors, Nvfp4DecodesHandComputedValues) {
  // Byte 0x72: element 0 = low nibble 2 (1.0), element 1 = high nibble 7 (6.0); scale 0x40 = 2.0; global 0.5.
  Nvfp4 n(1, 16);
  n.main.assign(8, 0x72);
  n.main[7] = 0x9F;  // element 14 = 0xF (-6), element 15 = 0x9 (-0.5)
  n.scales = {0x40};
  n.sync();
  float out[16];
  decode_rows(n.wb, 0, 1, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(out[14], -6.0f);
  EXPECT_EQ(out[15], -0.5f);
  // compressed-tensors: the same bytes with the divisor 2.0 give the same values.
  n.wb.format = FormatId::NVFP4_CT;
  n.global = f32_bytes(2.0f);
  n.sync();
  decode_rows(n.wb, 0, 1, out);
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(nvfp4_global_multiplier(n.wb), 0.5f);
  EXPECT_EQ(nvfp4_input_multiplier(n.wb), 0.0f);  // none stored
  n.input = f32_bytes(4.0f);
  n.sync();
  EXPECT_EQ(nvfp4_input_multiplier(n.wb), 0.25f);  // input_global_scale is a divisor too
  EXPECT_EQ(error_id([&] { decode_rows(n.wb, 1, 1, out); }), "E_INTERNAL_DECODE_RANGE");
}

TEST(DecodeErrors, MxScaleNan) {
  for (DType sd : {DType::U8, DType::F8_E8M0}) {
    std::vector<uint8_t> w(2 * 32, 0x38), s(2, 127);
    WeightBytes wb;
    wb.format = FormatId::MXFP8;
    wb.main_dtype = DType::F8_E4M3;
    wb.scale_dtype = sd;
    wb.rows = 2;
    wb.cols = 32;
    wb.main = w;
    wb.block_scale = s;
    Warnings warn;
    EXPECT_EQ(error_id([&] { validate_weight_bytes(wb, {}, warn); }), "no error");
    s[1] = 0xFF;
    EXPECT_EQ(error_id([&] { validate_weight_bytes(wb, {}, warn); }), "E_MX_SCALE_NAN");
    s[1] = 0x00;  // 2^-127 is a valid scale
    w[40] = 0x7F;
    EXPECT_EQ(error_id([&] { validate_weight_bytes(wb, {}, warn); }), "no error");
    EXPECT_EQ(error_id([&] { validate_weight_bytes(wb, {}, warn, /*check_elements=*/true); }),
              "E_FP8_WEIGHT_NAN");
    float out[64];
    decode_rows(wb, 0, 2, out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[33], std::ldexp(1.0f, -127));
    EXPECT_TRUE(std::isnan(out[40]));

    std::vector<uint8_t> p(2 * 16, 0x22), ps(2, 0xFF);
    WeightBytes m4 = wb;
    m4.format = FormatId::MXFP4;
    m4.main_dtype = DType::U8;
    m4.main = p;
    m4.block_scale = ps;
    EXPECT_EQ(error_id([&] { validate_weight_bytes(m4, {}, warn); }), "E_MX_SCALE_NAN");
    wb.cols = 48;
    EXPECT_EQ(error_id([&] { validate_weight_bytes(wb, {}, warn); }), "E_MXFP8_K_ALIGN");
  }
}

TEST(DecodeErrors, Fp8ScalesAndBlockGrid) {
  std::vector<uint8_t> w(3 * 5, 0x38);  // every element 1.0
  Warnings warn;
  WeightBytes t;
  t.format = FormatId::FP8_TENSOR;
  t.main_dtype = DType::F8_E4M3;
  t.rows = 3;
  t.cols = 5;
  t.main = w;
  for (float bad :
       {0.0f, -2.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    const std::vector<uint8_t> s = f32_bytes(bad);
    t.global_scale = s;
    EXPECT_EQ(error_id([&] { validate_weight_bytes(t, {}, warn); }), "E_FP8_SCALE_NONFINITE") << bad;
  }
  const std::vector<uint8_t> bf16_nan = {0xC0, 0x7F};
  t.global_dtype = DType::BF16;
  t.global_scale = bf16_nan;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(t, {}, warn); }), "E_FP8_SCALE_NONFINITE");

  WeightBytes c = t;
  c.format = FormatId::FP8_CHANNEL;
  c.global_scale = {};
  c.scale_dtype = DType::F32;
  std::vector<uint8_t> cs;
  for (float v : {1.0f, -1.0f, 2.0f}) {
    const auto b = f32_bytes(v);
    cs.insert(cs.end(), b.begin(), b.end());
  }
  c.block_scale = cs;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(c, {}, warn); }), "E_FP8_SCALE_NONFINITE");
  c.block_scale = std::span(cs).subspan(0, 8);
  EXPECT_EQ(error_id([&] { validate_weight_bytes(c, {}, warn); }), "E_FP8_SCALE_SHAPE");

  // 3 × 5 with 2 × 2 tiles: a ceil-sized 2 × 3 grid of E8M0 scales 2^0 .. 2^5, partial edge tiles.
  WeightBytes b = t;
  b.format = FormatId::FP8_BLOCK;
  b.global_scale = {};
  b.scale_dtype = DType::F8_E8M0;
  b.block_n = b.block_k = 2;
  std::vector<uint8_t> grid = {127, 128, 129, 130, 131, 132};
  b.block_scale = grid;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(b, {}, warn); }), "no error");
  float out[15];
  decode_rows(b, 0, 3, out);
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 5; ++k)
      EXPECT_EQ(out[r * 5 + k], std::ldexp(1.0f, (r / 2) * 3 + k / 2)) << r << "," << k;
  grid[5] = 0xFF;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(b, {}, warn); }), "E_MX_SCALE_NAN");
  grid.pop_back();
  b.block_scale = grid;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(b, {}, warn); }), "E_FP8_SCALE_SHAPE");
  b.block_n = 0;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(b, {}, warn); }), "E_FP8_BLOCK_GRID");
  b.block_n = 2;
  b.main_dtype = DType::BF16;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(b, {}, warn); }), "E_FP8_WEIGHT_DTYPE");
}

TEST(DecodeErrors, DenseWidensBits) {
  const std::vector<uint8_t> bf = {0x80, 0x3F, 0xC1, 0xFF, 0x00, 0x80};  // 1.0, NaN payload, -0
  WeightBytes d;
  d.format = FormatId::BF16;
  d.main_dtype = DType::BF16;
  d.rows = 1;
  d.cols = 3;
  d.main = bf;
  Warnings warn;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(d, {}, warn); }), "no error");
  float out[3];
  decode_rows(d, 0, 1, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(out[1]), 0xFFC10000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(out[2]), 0x80000000u);
  d.cols = 4;
  EXPECT_EQ(error_id([&] { validate_weight_bytes(d, {}, warn); }), "E_DENSE_SHAPE");
}

}  // namespace
}  // namespace bloomery
