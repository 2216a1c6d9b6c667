// The BF16 element type of the K/V caches (-ctk/-ctv bf16) on the CPU backend: the cache write rounds to
// nearest even exactly as torch and __float2bfloat16_rn do, reads widen exactly, and attention over a BF16
// cache is the f32 attention over the rounded values, bit for bit.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "backend/op_checks.h"
#include "core/error.h"
#include "cpu_test_util.h"
#include "formats/elements.h"

namespace bloomery {
namespace {

using test::randv;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even by hand, through double arithmetic: the two BF16 neighbours and the nearer one.
float rne_by_hand(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const float lo = from_bits(u & 0xFFFF0000u), hi = from_bits((u & 0xFFFF0000u) + 0x10000u);
  const double dl = std::fabs(static_cast<double>(x) - lo), dh = std::fabs(static_cast<double>(hi) - x);
  if (dl != dh) return dl < dh ? lo : hi;
  return ((u >> 16) & 1u) ? hi : lo;  // a tie: the even one
}

TEST(Bf16Cache, CopyRoundsToNearestEvenAndWidensExactly) {
  auto be = make_cpu_backend(1);
  std::vector<float> x = {1.0f,
                          -2.5f,
                          from_bits(0x3F808000u),  // a tie with an even upper half: stays down
                          from_bits(0x3F818000u),  // a tie with an odd upper half: goes up
                          from_bits(0x3F808001u),  // just past a tie: up
                          from_bits(0x00012345u),  // a denormal
                          3.0e38f,
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          from_bits(0x7F7FFFFFu)};  // FLT_MAX rounds to +inf, as torch does
  const auto r = randv(1000, 7, -100.0f, 100.0f);
  x.insert(x.end(), r.begin(), r.end());
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor f = be->upload(x, {n}), h = be->alloc({n}, ElemType::BF16), back = be->alloc({n});
  EXPECT_EQ(h.nbytes(), static_cast<size_t>(n) * 2);
  be->copy(h, f);
  be->copy(back, h);
  const auto down = be->download(h), wide = be->download(back);
  for (int64_t i = 0; i < n; ++i) {
    const float want =
        x[i] == from_bits(0x7F7FFFFFu) ? std::numeric_limits<float>::infinity() : rne_by_hand(x[i]);
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(down[i]) && std::isnan(wide[i])) << i;
      continue;
    }
    EXPECT_EQ(down[i], want) << "element " << i << " = " << x[i];
    EXPECT_EQ(wide[i], want) << "element " << i;
    EXPECT_EQ(elem::bf16(elem::bf16_rne(x[i])), want) << i;
  }
  // BF16 -> BF16 copies a slice's bits; fill rounds its value.
  Tensor part = be->alloc({4}, ElemType::BF16);
  be->copy(part, h.slice(2, 4));
  EXPECT_EQ(be->download(part), std::vector<float>(down.begin() + 2, down.begin() + 6));
  be->fill(part, 1.00390625f);  // 1 + 2^-8: a tie, rounds to 1
  EXPECT_EQ(be->download(part), std::vector<float>(4, 1.0f));
}

TEST(Bf16Cache, TypesAreChecked) {
  auto be = make_cpu_backend(1);
  Tensor h = be->alloc({4}, ElemType::BF16), i = be->alloc({4}, ElemType::I32);
  EXPECT_THROW(be->copy(h, i), Error);
  EXPECT_THROW((void)h.f32(), std::logic_error);
  Tensor q = be->alloc({1, 2, 4}), kf = be->alloc({3, 1, 4}), kb = be->alloc({3, 1, 4}, ElemType::BF16);
  Tensor o = be->alloc({1, 2, 4});
  EXPECT_THROW(be->attention(o, q, kf, kb, 2, 1.0f), Error);  // K and V of two types
}

// Attention over a BF16 cache equals attention over f32 tensors holding the rounded values, bit for bit:
// causal GQA, a sparse mask, a query block at depth.
TEST(Bf16Cache, AttentionReadsTheRoundedValues) {
  auto be = make_cpu_backend(2);
  const int64_t S = 40, T = 5, Hq = 6, Hkv = 2, d = 16, q0 = S - T;
  const auto qv = randv(T * Hq * d, 41, -2.0f, 2.0f), kv = randv(S * Hkv * d, 42),
             vv = randv(S * Hkv * d, 43);
  std::vector<float> kr(kv.size()), vr(vv.size()), allowed(T * S, 1.0f);
  for (size_t i = 0; i < kv.size(); ++i) kr[i] = rne_by_hand(kv[i]), vr[i] = rne_by_hand(vv[i]);
  for (size_t i = 0; i < allowed.size(); i += 3) allowed[i] = 0.0f;
  Tensor q = be->upload(qv, {T, Hq, d}), a = be->upload(allowed, {T, S});
  Tensor kb = be->alloc({S, Hkv, d}, ElemType::BF16), vb = be->alloc({S, Hkv, d}, ElemType::BF16);
  Tensor k_src = be->upload(kv, {S, Hkv, d}), v_src = be->upload(vv, {S, Hkv, d});
  be->copy(kb, k_src);
  be->copy(vb, v_src);
  Tensor kf = be->upload(kr, {S, Hkv, d}), vf = be->upload(vr, {S, Hkv, d});
  for (bool mask : {false, true}) {
    Tensor ob = be->alloc({T, Hq, d}), of = be->alloc({T, Hq, d});
    be->attention(ob, q, kb, vb, q0, 0.25f, mask ? &a : nullptr);
    be->attention(of, q, kf, vf, q0, 0.25f, mask ? &a : nullptr);
    EXPECT_EQ(be->download(ob), be->download(of)) << (mask ? "masked" : "causal");
  }
}

}  // namespace
}  // namespace bloomery
