// nvfp4_csf codec (formats.md §8.4) and compressed-data TP slicing (§8.5): hand-built streams, every E_CSF_
// check, and encode/decode/slice agreement on random matrices.
#include <gtest/gtest.h>

#include <random>

#include "formats/csf.h"
#include "formats_test_util.h"

namespace bloomery {
namespace {

using testing::error_id;

std::vector<uint8_t> random_scales(uint64_t R, uint64_t C, uint32_t seed, int lo = 0x20, int hi = 0x60) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> s(R * C);
  for (auto& b : s) b = uint8_t(d(rng));
  return s;
}

std::vector<uint8_t> decode_all(const csf::Streams& st) {
  std::vector<uint8_t> out(st.rows * st.cols);
  csf::decode(st.fixed, st.exceptions, st.rows, st.cols, out.data(), {});
  return out;
}

TEST(Csf, HandBuiltStreamDecodes) {
  // R = 16, C = 2: slab = 16 bases + 16 code bytes. Row i: base 10 + i, codes (1, 2); one exception.
  std::vector<uint8_t> fixed(csf::slab_bytes(2));
  for (int i = 0; i < 16; ++i) {
    fixed[i] = uint8_t(10 + i);
    fixed[16 + i] = 0x21;  // low nibble = column 0 (code 1), high = column 1 (code 2)
  }
  const std::vector<uint32_t> exc = {5u | (0x7Eu << 24)};  // position 5 = row 2, column 1
  std::vector<uint8_t> out(32);
  csf::decode(fixed, exc, 16, 2, out.data(), {});
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(out[2 * i], 11 + i);
    if (i != 2) EXPECT_EQ(out[2 * i + 1], 12 + i);
  }
  EXPECT_EQ(out[5], 0x7E);
  fixed[0] = 240;
  fixed[16] = 0xFF;  // the largest sum: 240 + 15
  csf::decode(fixed, exc, 16, 2, out.data(), {});
  EXPECT_EQ(out[0], 255);
  EXPECT_EQ(out[1], 255);
}

TEST(Csf, EncoderFollowsTheBaseRule) {
  std::vector<uint8_t> s(16 * 4, 0x40);
  s[0] = 0x00;  // row 0 is {0x00, 0x10, 0x40, 0x40}: no window [b, b+15] holds two of 0x00, 0x10, 0x40,
  s[1] = 0x10;  // so the best windows hold the two 0x40s: bases 0x31..0x40, the lowest wins
  const csf::Streams st = csf::encode(s.data(), 16, 4);
  EXPECT_EQ(st.fixed[0], 0x31);
  EXPECT_EQ(st.fixed[1], 0x31);  // a row of 0x40 only: the lowest base whose window holds it
  EXPECT_EQ(st.exceptions, (std::vector<uint32_t>{0u | (0x00u << 24), 1u | (0x10u << 24)}));
  EXPECT_EQ(st.fixed[16], 0x00);  // row 0, columns 0 and 1: exceptions keep nibble 0
  EXPECT_EQ(st.fixed[17], 0xFF);  // row 0, columns 2 and 3: 0x40 − 0x31 = 15
  EXPECT_EQ(decode_all(st), s);
}

TEST(Csf, RoundTripAndSlabDecodeAndSlice) {
  const uint64_t R = 64, C = 12;
  const std::vector<uint8_t> s = random_scales(R, C, 1, 0x10, 0x70);
  const csf::Streams st = csf::encode(s.data(), R, C);
  EXPECT_FALSE(st.exceptions.empty());
  EXPECT_EQ(decode_all(st), s);
  for (uint32_t w : st.exceptions) EXPECT_LE(w & 0xFFFFFFu, R * C - 1);
  // Slabs 1..2 alone.
  const uint64_t sb = csf::slab_bytes(C);
  std::vector<uint8_t> part(32 * C);
  csf::decode_slabs(std::span(st.fixed).subspan(sb, 2 * sb), 1, st.exceptions, R, C, part.data(), {});
  EXPECT_TRUE(std::equal(part.begin(), part.end(), s.begin() + 16 * C));
  // Row and column slice on compressed data equals the crop.
  const csf::Streams sl = csf::slice(st.fixed, st.exceptions, R, C, 16, 48, 2, 8, {});
  const std::vector<uint8_t> win = decode_all(sl);
  for (uint64_t r = 16; r < 48; ++r)
    for (uint64_t c = 2; c < 8; ++c) EXPECT_EQ(win[(r - 16) * 6 + (c - 2)], s[r * C + c]);
  // w13 plane: up then gate, positions of the second shifted by rows_first · C.
  const std::vector<uint8_t> s2 = random_scales(32, C, 2, 0, 250);
  const csf::Streams both = csf::concat_rows(st, csf::encode(s2.data(), 32, C), {});
  std::vector<uint8_t> want = s;
  want.insert(want.end(), s2.begin(), s2.end());
  EXPECT_EQ(decode_all(both), want);
}

TEST(Csf, TwoDimensionalFixedStreamGeometry) {
  const uint64_t R = 32, C = 6;
  const std::vector<uint64_t> good = {2, csf::slab_bytes(C)};
  EXPECT_EQ(error_id([&] { csf::check_geometry(R, C, good, {}); }), "no error");
  const std::vector<uint64_t> bad_rows = {1, csf::slab_bytes(C)};
  EXPECT_EQ(error_id([&] { csf::check_geometry(R, C, bad_rows, {}); }), "E_CSF_GEOMETRY");
  const std::vector<uint64_t> not_16 = {2, 60};
  EXPECT_EQ(error_id([&] { csf::check_geometry(R, C, not_16, {}); }), "E_CSF_GEOMETRY");
  const std::vector<uint64_t> wrong_c = {2, 16 * 5};
  EXPECT_EQ(error_id([&] { csf::check_geometry(R, C, wrong_c, {}); }), "E_CSF_GEOMETRY");
  const std::vector<uint64_t> flat = {csf::fixed_bytes(R, C)}, flat_bad = {csf::fixed_bytes(R, C) + 1};
  EXPECT_EQ(error_id([&] { csf::check_geometry(R, C, flat, {}); }), "no error");
  EXPECT_EQ(error_id([&] { csf::check_geometry(R, C, flat_bad, {}); }), "E_CSF_GEOMETRY");
  const std::vector<uint64_t> rank3 = {1, 2, 3};
  EXPECT_EQ(error_id([&] { csf::check_geometry(R, C, rank3, {}); }), "E_CSF_GEOMETRY");
}

TEST(Csf, EveryCodecErrorHasItsId) {
  const uint64_t R = 16, C = 4;
  const std::vector<uint8_t> s = random_scales(R, C, 3);
  csf::Streams st = csf::encode(s.data(), R, C);
  std::vector<uint8_t> out(R * C);
  auto dec = [&](const std::vector<uint8_t>& fixed, const std::vector<uint32_t>& exc, uint64_t r,
                 uint64_t c) {
    return error_id([&] {
      std::vector<uint8_t> o(r * c);
      csf::decode(fixed, exc, r, c, o.data(), {});
    });
  };
  EXPECT_EQ(dec(st.fixed, st.exceptions, R, C), "no error");
  std::vector<uint8_t> bad_base = st.fixed;
  bad_base[3] = 241;
  EXPECT_EQ(dec(bad_base, {}, R, C), "E_CSF_BASE_RANGE");
  EXPECT_EQ(dec(st.fixed, {5, 3}, R, C), "E_CSF_EXC_ORDER");
  EXPECT_EQ(dec(st.fixed, {3, 3}, R, C), "E_CSF_EXC_ORDER");
  EXPECT_EQ(dec(st.fixed, {uint32_t(R * C)}, R, C), "E_CSF_EXC_RANGE");
  EXPECT_EQ(dec(st.fixed, {uint32_t(R * C - 1) | 0xFF000000u}, R, C), "no error");
  EXPECT_EQ(dec(st.fixed, {}, 17, C), "E_CSF_GEOMETRY");
  EXPECT_EQ(dec(std::vector<uint8_t>(csf::fixed_bytes(16, 3)), {}, 16, 3), "E_CSF_GEOMETRY");
  EXPECT_EQ(dec(std::vector<uint8_t>(st.fixed.begin(), st.fixed.end() - 1), {}, R, C), "E_CSF_GEOMETRY");
  // 16384 × 1026 > 2^24 positions: refused before anything is read or allocated.
  const std::vector<uint64_t> big = {csf::fixed_bytes(16384, 1026)};
  EXPECT_EQ(error_id([&] { csf::check_geometry(16384, 1026, big, {}); }), "E_CSF_TOO_LARGE");
  const std::vector<uint64_t> limit = {csf::fixed_bytes(16384, 1024)};
  EXPECT_EQ(error_id([&] { csf::check_geometry(16384, 1024, limit, {}); }), "no error");
  EXPECT_EQ(error_id([&] { csf::check_kernel_geometry(64, 4, {}); }), "E_CSF_KERNEL_GEOMETRY");
  EXPECT_EQ(error_id([&] { csf::check_kernel_geometry(128, 6, {}); }), "E_CSF_KERNEL_GEOMETRY");
  EXPECT_EQ(error_id([&] { csf::check_kernel_geometry(256, 8, {}); }), "no error");
  const std::vector<uint8_t> five(5);
  EXPECT_EQ(error_id([&] { csf::load_exceptions(five, {}); }), "E_CSF_GEOMETRY");
  const uint8_t le[8] = {0x01, 0x02, 0x03, 0x7E, 0, 0, 0, 0};
  EXPECT_EQ(csf::load_exceptions(le, {}), (std::vector<uint32_t>{0x7E030201u, 0}));
}

TEST(Csf, PaddingKeepsValuesAndZeroesNewRows) {
  const uint64_t R = 32, C = 6;
  const std::vector<uint8_t> s = random_scales(R, C, 5, 0, 250);
  const csf::Streams st = csf::encode(s.data(), R, C);
  const csf::Streams p = csf::pad(st, 48, 10, {});
  const std::vector<uint8_t> out = decode_all(p);
  for (uint64_t r = 0; r < 48; ++r)
    for (uint64_t c = 0; c < 10; ++c) {
      if (r < R && c < C)
        EXPECT_EQ(out[r * 10 + c], s[r * C + c]);
      else if (r >= R)
        EXPECT_EQ(out[r * 10 + c], 0) << "padded rows decode to scale 0";
      else
        EXPECT_EQ(out[r * 10 + c], p.fixed[(r / 16) * csf::slab_bytes(10) + r % 16])
            << "padded columns = base";
    }
  EXPECT_EQ(error_id([&] { csf::pad(st, 16, 6, {}); }), "E_CSF_TP_EXTENT");
  EXPECT_EQ(error_id([&] { csf::pad(st, 40, 6, {}); }), "E_CSF_GEOMETRY");
}

TEST(Csf, TensorParallelExtents) {
  const uint64_t R = 32, C = 8;
  const std::vector<uint8_t> s = random_scales(R, C, 4);
  const csf::Streams st = csf::encode(s.data(), R, C);
  auto slice = [&](uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) {
    return error_id([&] { csf::slice(st.fixed, st.exceptions, R, C, r0, r1, c0, c1, {}); });
  };
  EXPECT_EQ(slice(0, 16, 0, 8), "no error");
  EXPECT_EQ(slice(8, 32, 0, 8), "E_CSF_TP_EXTENT");  // not whole slabs
  EXPECT_EQ(slice(0, 32, 1, 8), "E_CSF_TP_EXTENT");  // odd column
  EXPECT_EQ(slice(0, 48, 0, 8), "E_CSF_TP_EXTENT");  // beyond R
  // Qwen3.8-Flash-Next: I = 640 → TP 1 and 2 only. GLM-5.3-Flash: I = 2048 → TP 1/2/4/8, not 3.
  for (int tp : {1, 2}) EXPECT_EQ(error_id([&] { csf::check_tp_extent(640, 2560, tp, {}); }), "no error");
  EXPECT_EQ(error_id([&] { csf::check_tp_extent(640, 2560, 4, {}); }), "E_CSF_TP_EXTENT");
  for (int tp : {1, 2, 4, 8})
    EXPECT_EQ(error_id([&] { csf::check_tp_extent(2048, 6144, tp, {}); }), "no error");
  EXPECT_EQ(error_id([&] { csf::check_tp_extent(2048, 6144, 3, {}); }), "E_CSF_TP_EXTENT");
  EXPECT_EQ(error_id([&] { csf::check_tp_extent(2048, 6100, 1, {}); }), "E_CSF_TP_EXTENT");
}

}  // namespace
}  // namespace bloomery
