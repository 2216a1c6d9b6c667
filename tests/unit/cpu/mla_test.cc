// glm5_next DSA (§4.7): absorbed MLA vs the expanded K/V form, pooled indexer keys, selection with tail and
// tie reporting.
#include <cmath>

#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace bloomery {

using test::max_abs;
using test::max_abs_diff;
using test::randv;

TEST(Mla, AbsorbedEqualsExpandedAttention) {
  auto be = make_cpu_backend(2);
  const int64_t S = 7, T = 3, q0 = 4, H = 2, dq = 5, dv = 3, L = 6;
  auto qv = randv(T * H * dq, 1), lat = randv(S * L, 2), kvb = randv(H * (dq + dv) * L, 3);
  std::vector<float> allowed(T * S, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j <= q0 + t; ++j) allowed[t * S + j] = (j + t) % 3 != 1 ? 1.0f : 0.0f;
  Weight wkv = be->upload_weight("kv_b", kvb, {H * (dq + dv), L});
  Tensor q = be->upload(qv, {T, H, dq}), c = be->upload(lat, {S, L}), a = be->upload(allowed, {T, S});
  Tensor o = be->alloc({T, H, dv});
  const float scale = 0.37f;
  be->mla_attention(o, q, c, wkv, q0, scale, a);
  auto got = be->download(o);
  std::vector<float> want(T * H * dv, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      // k_j = W_uk c_j, v_j = W_uv c_j (expanded, as transformers computes them)
      std::vector<double> s;
      std::vector<int64_t> idx;
      for (int64_t j = 0; j < S; ++j) {
        if (allowed[t * S + j] == 0.0f) continue;
        double dot = 0;
        for (int64_t a2 = 0; a2 < dq; ++a2) {
          double k = 0;
          for (int64_t l = 0; l < L; ++l) k += kvb[(h * (dq + dv) + a2) * L + l] * lat[j * L + l];
          dot += qv[(t * H + h) * dq + a2] * k;
        }
        s.push_back(dot * scale);
        idx.push_back(j);
      }
      double mx = -1e30, sum = 0;
      for (double x : s) mx = std::max(mx, x);
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t e = 0; e < dv; ++e) {
        double acc = 0;
        for (size_t i = 0; i < idx.size(); ++i) {
          double v = 0;
          for (int64_t l = 0; l < L; ++l) v += kvb[(h * (dq + dv) + dq + e) * L + l] * lat[idx[i] * L + l];
          acc += s[i] / sum * v;
        }
        want[(t * H + h) * dv + e] = static_cast<float>(acc);
      }
    }
  EXPECT_LT(max_abs_diff(got, want), 1e-5f * max_abs(want));
}

TEST(Dsa, PooledKeysAndSelection) {
  auto be = make_cpu_backend(1);
  const int64_t P = 4, d = 3, T = 10, Hi = 2;
  auto k = randv(T * d, 4), gs = randv(T * d, 5), ape = randv(P * d, 6);
  Weight wape = be->upload_weight("ape", ape, {P, d});
  Tensor keys = be->alloc({16, d}), gates = be->alloc({16, d}), pools = be->alloc({5, d});
  Tensor kt = be->upload(k, {T, d}), gt = be->upload(gs, {T, d});
  be->dsa_index_append(keys, gates, pools, kt, gt, 0, wape);
  auto pk = be->download(pools);
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t j = 0; j < d; ++j) {
      double z = 0, acc = 0;
      for (int64_t m = 0; m < P; ++m) z += std::exp(gs[(p * P + m) * d + j] + ape[m * d + j]);
      for (int64_t m = 0; m < P; ++m)
        acc += std::exp(gs[(p * P + m) * d + j] + ape[m * d + j]) / z * k[(p * P + m) * d + j];
      EXPECT_NEAR(pk[p * d + j], acc, 1e-5);
    }
  // Scores: Σ_h w_h relu(q_h·K_p / sqrt(d)). Pick q so that pool 1 wins; topk = 4 tokens = 1 pool.
  std::vector<float> qi(Hi * d, 0.0f), w = {1.0f, -0.5f};
  for (int64_t j = 0; j < d; ++j) qi[j] = pk[1 * d + j] - pk[0 * d + j];
  Tensor q = be->upload(qi, {1, Hi, d}), wt = be->upload(w, {1, Hi});
  Tensor allowed = be->alloc({1, T});
  be->dsa_index_select(allowed, q, wt, pools, T - 1, P, 4);
  auto a = be->download(allowed);
  double s0 = 0, s1 = 0;
  for (int64_t j = 0; j < d; ++j) s0 += qi[j] * pk[j], s1 += qi[j] * pk[d + j];
  const int64_t best = std::max(s0, 0.0) >= std::max(s1, 0.0) ? 0 : 1;
  std::vector<float> want(T, 0.0f);
  for (int64_t m = 0; m < P; ++m) want[best * P + m] = 1.0f;
  want[8] = want[9] = 1.0f;  // tail: 10 visible tokens, 10 mod 4 = 2
  EXPECT_EQ(a, want);
  // A zero query: every pool scores 0 → a tie at the cut, reported, lowest pool kept.
  std::vector<float> zero(Hi * d, 0.0f);
  Tensor qz = be->upload(zero, {1, Hi, d});
  EXPECT_EQ(be->dsa_index_select(allowed, qz, wt, pools, T - 1, P, 4), 1);
  a = be->download(allowed);
  std::fill(want.begin(), want.end(), 0.0f);
  for (int64_t p : {0, 1, 2, 3, 8, 9}) want[p] = 1.0f;
  EXPECT_EQ(a, want);
}

}  // namespace bloomery
