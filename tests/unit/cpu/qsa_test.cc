// QSA indexer (qwen4_exp §3.8): pooled block keys, top blocks plus the open tail, tie reporting, and
// incremental appends equal to one bulk append.
#include <cmath>

#include <gtest/gtest.h>

#include "backend/cpu/hyper_connections.h"
#include "backend/cpu/qsa.h"
#include "cpu_test_util.h"

namespace bloomery {

using test::max_abs_diff;
using test::randv;

namespace {
QsaIndexSpec spec_for(int block_topk) {
  QsaIndexSpec s;
  s.compress = 4;
  s.block_topk = block_topk;
  s.rot_dim = 4;
  s.theta = 10000.0;
  return s;
}
}  // namespace

TEST(Qsa, BlockKeysAreMeanNormRopeAtFirstPosition) {
  auto be = make_cpu_backend(1);
  const int64_t T = 9, d = 8;
  auto kr = randv(T * d, 1), nw = randv(d, 2, -0.2f, 0.2f);
  Weight knorm = be->upload_weight("k_layernorm", nw, {d});
  Tensor raw = be->alloc({16, d}), blocks = be->alloc({5, d}), k = be->upload(kr, {T, d});
  be->qsa_index_append(raw, blocks, k, 0, knorm, spec_for(2));
  auto got = be->download(blocks);
  for (int64_t b = 0; b < 2; ++b) {  // 9 tokens: two complete blocks
    std::vector<float> mean(d), want(d);
    for (int64_t j = 0; j < d; ++j) {
      float acc = 0;
      for (int m = 0; m < 4; ++m) acc += kr[(b * 4 + m) * d + j];
      mean[j] = acc / 4;
    }
    cpu::grouped_rmsnorm1p(mean.data(), nw.data(), 1, d, 1e-6f, want.data());
    for (int i = 0; i < 2; ++i) {  // NeoX rotation of the first 4 dims at the block's first position 4b
      const double ang = 4.0 * b * std::pow(10000.0, -2.0 * i / 4);
      const double a = want[i], c = want[i + 2];
      EXPECT_NEAR(got[b * d + i], a * std::cos(ang) - c * std::sin(ang), 1e-5);
      EXPECT_NEAR(got[b * d + i + 2], c * std::cos(ang) + a * std::sin(ang), 1e-5);
    }
    for (int64_t j = 4; j < d; ++j) EXPECT_NEAR(got[b * d + j], want[j], 1e-6);
  }
  // The same keys appended one token at a time give the same blocks.
  Tensor raw2 = be->alloc({16, d}), blocks2 = be->alloc({5, d});
  for (int64_t t = 0; t < T; ++t) {
    Tensor one = be->upload(std::vector<float>(kr.begin() + t * d, kr.begin() + (t + 1) * d), {1, d});
    be->qsa_index_append(raw2, blocks2, one, t, knorm, spec_for(2));
  }
  EXPECT_EQ(max_abs_diff(be->download(blocks2), got), 0.0f);
}

TEST(Qsa, SelectsTopBlocksPlusTailAndReportsTies) {
  auto be = make_cpu_backend(1);
  const int64_t d = 4, Hi = 2, nb = 4;
  // Block keys chosen so head 0 scores block b as (b+1) and head 1 contributes nothing (relu of negatives).
  std::vector<float> kb(nb * d, 0.0f);
  for (int64_t b = 0; b < nb; ++b) kb[b * d] = static_cast<float>(b + 1);
  kb[1 * d] = 4.0f;  // block 1 ties with block 3
  Tensor blocks = be->upload(kb, {nb, d});
  std::vector<float> qi(Hi * d, 0.0f);
  qi[0] = 1.0f;
  qi[d] = -1.0f;
  // Query at position 17: visible 18 tokens = 4 complete blocks + tail {16, 17}; top 2 blocks of scores
  // [1, 4, 3, 4] → blocks 1 and 3 (tied at 4, both kept: no tie at the cut).
  Tensor q = be->upload(qi, {1, Hi, d});
  Tensor allowed = be->alloc({1, 18});
  EXPECT_EQ(be->qsa_index_select(allowed, q, blocks, 17, spec_for(2)), 0);
  auto a = be->download(allowed);
  std::vector<float> want(18, 0.0f);
  for (int64_t p : {4, 5, 6, 7, 12, 13, 14, 15, 16, 17}) want[p] = 1.0f;
  EXPECT_EQ(a, want);
  // Top 1: blocks 1 and 3 tie at the cut → the lower block wins and the tie is reported.
  EXPECT_EQ(be->qsa_index_select(allowed, q, blocks, 17, spec_for(1)), 1);
  a = be->download(allowed);
  std::fill(want.begin(), want.end(), 0.0f);
  for (int64_t p : {4, 5, 6, 7, 16, 17}) want[p] = 1.0f;
  EXPECT_EQ(a, want);
  // Query at position 15: 16 visible tokens, empty tail; its own block competes and may lose.
  Tensor allowed16 = be->alloc({1, 16});
  EXPECT_EQ(be->qsa_index_select(allowed16, q, blocks, 15, spec_for(1)), 1);
  a = be->download(allowed16);
  std::vector<float> want16(16, 0.0f);
  for (int64_t p : {4, 5, 6, 7}) want16[p] = 1.0f;
  EXPECT_EQ(a, want16);
}

TEST(Qsa, StableTopk) {
  bool tie = false;
  EXPECT_EQ(cpu::stable_topk({0.0f, 2.0f, 0.0f, 1.0f}, 2, &tie), (std::vector<int64_t>{1, 3}));
  EXPECT_FALSE(tie);
  EXPECT_EQ(cpu::stable_topk({0.0f, 2.0f, 0.0f, 1.0f}, 3, &tie), (std::vector<int64_t>{1, 3, 0}));
  EXPECT_TRUE(tie);  // zeros at 0 and 2 straddle the cut
}

}  // namespace bloomery
