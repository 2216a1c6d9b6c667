// PLE (qwen4_exp §3.6): hash constants against the shipped values, n-gram rows with EOS resets recomputed by
// hand from the formula, and the stream gate.
#include <cmath>

#include <gtest/gtest.h>

#include "backend/cpu/ple_hash.h"
#include "cpu_test_util.h"

namespace bloomery {

using test::randv;

TEST(Ple, ShippedHashConstants) {
  // models.md §3.6: V = 248320, seed 1234, ngram 3 × 8 heads, base 20,000,000, divisor 128, first PLE layer.
  const cpu::PleHash h = cpu::make_ple_hash(248320, 3, 8, 20000000, 128, 1234, 0, 248044);
  EXPECT_EQ(h.multipliers, (std::vector<int64_t>{23703573157769, 20109073645365, 8052911324071}));
  const std::vector<int64_t> primes = {20000003, 20000023, 20000033, 20000047, 20000059, 20000063,
                                       20000069, 20000077, 20000081, 20000093, 20000107, 20000147,
                                       20000153, 20000159, 20000161, 20000171};
  EXPECT_EQ(h.head_sizes, primes);
  EXPECT_EQ(h.head_offsets[0], 0);
  EXPECT_EQ(h.head_offsets[15], 320001446 - 20000171);
  EXPECT_EQ(h.padded_rows, 320001536);
  // A second PLE layer continues the prime walk after the first layer's 16 heads and changes the multipliers.
  const cpu::PleHash h1 = cpu::make_ple_hash(248320, 3, 8, 20000000, 128, 1234, 1, 248044);
  EXPECT_GT(h1.head_sizes[0], primes.back());
  EXPECT_NE(h1.multipliers, h.multipliers);
}

TEST(Ple, NgramRowsWithEosResets) {
  const int64_t eos = 2;
  const cpu::PleHash h = cpu::make_ple_hash(512, 3, 8, 256, 128, 1234, 0, eos);
  ASSERT_EQ(h.heads(), 16);
  cpu::PleContext ctx = cpu::ple_context_start(h);
  const std::vector<int64_t> seq = {5, 7, eos, 9, 11, 13};
  // (tok_0, tok_1, tok_2) per position after the EOS rule, worked out by hand:
  const std::vector<std::array<int64_t, 3>> want = {
      {5, eos, eos},  // sequence start: the context is EOS, EOS
      {7, 5, eos},    // t−2 is before the start
      {eos, 7, 5},    // the current token being EOS does not change its own n-grams
      {9, eos, eos},  // previous token is EOS: both shifts reset
      {11, 9, eos},   // EOS at t−2 resets the 3-gram only
      {13, 11, 9},
  };
  for (size_t t = 0; t < seq.size(); ++t) {
    std::vector<int64_t> rows(16);
    cpu::ple_rows_and_advance(h, ctx, seq[t], rows.data());
    const auto& w = want[t];
    const int64_t h2 = (w[0] * h.multipliers[0]) ^ (w[1] * h.multipliers[1]);
    const int64_t h3 = h2 ^ (w[2] * h.multipliers[2]);
    for (int j = 0; j < 16; ++j) {
      const int64_t hash = j < 8 ? h2 : h3;
      EXPECT_EQ(rows[j], hash % h.head_sizes[j] + h.head_offsets[j]) << "t=" << t << " head " << j;
      EXPECT_LT(rows[j], h.padded_rows);
    }
  }
}

TEST(Ple, StreamGate) {
  auto be = make_cpu_backend(1);
  const int64_t T = 2, n = 3, D = 4;
  auto kn = randv(T * n * D, 1), qn = randv(T * n * D, 2), v = randv(T * D, 3);
  for (int64_t i = 0; i < D; ++i) kn[(1 * n + 2) * D + i] = 0.0f;  // a zero gate: sign 0 → σ(0) = 1/2
  Tensor G = be->alloc({T, n * D});
  Tensor k = be->upload(kn, {T, n * D}), q = be->upload(qn, {T, n * D}), vt = be->upload(v, {T, D});
  be->ple_gate(G, k, q, vt);
  auto got = be->download(G);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < n; ++s) {
      double g = 0;
      for (int64_t d = 0; d < D; ++d) g += kn[(t * n + s) * D + d] * qn[(t * n + s) * D + d];
      g /= std::sqrt(static_cast<double>(D));
      const double gh = (g > 0 ? 1 : g < 0 ? -1 : 0) * std::sqrt(std::max(std::fabs(g), 1e-6));
      for (int64_t d = 0; d < D; ++d)
        EXPECT_NEAR(got[(t * n + s) * D + d], v[t * D + d] / (1.0 + std::exp(-gh)), 1e-6);
    }
  EXPECT_NEAR(got[(1 * n + 2) * D], 0.5 * v[1 * D], 1e-7);
}

}  // namespace bloomery
