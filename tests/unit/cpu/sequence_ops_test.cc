// Ops with a time axis: rotary, causal attention, conv1d with state, gated delta rule (chunked vs recurrent).
#include <cmath>

#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace bloomery {

using test::max_abs;
using test::max_abs_diff;
using test::randv;

TEST(CpuOps, RopePartialNeox) {
  auto be = make_cpu_backend(1);
  const int64_t T = 3, H = 2, hd = 8;
  auto xv = randv(T * H * hd, 30);
  Tensor x = be->upload(xv, {T, H, hd});
  std::vector<int64_t> pos = {0, 5, 17};
  RopeSpec rs;
  rs.rot_dim = 4;
  rs.theta = 10000.0;
  be->rope(x, pos, rs);
  auto got = be->download(x);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* a = xv.data() + (t * H + h) * hd;
      const float* b = got.data() + (t * H + h) * hd;
      for (int i = 0; i < 2; ++i) {
        double ang = pos[t] * std::pow(10000.0, -2.0 * i / 4);
        EXPECT_NEAR(b[i], a[i] * std::cos(ang) - a[i + 2] * std::sin(ang), 1e-5);
        EXPECT_NEAR(b[i + 2], a[i + 2] * std::cos(ang) + a[i] * std::sin(ang), 1e-5);
      }
      for (int i = 4; i < hd; ++i) EXPECT_EQ(b[i], a[i]);  // pass-through dims
    }
}

TEST(CpuOps, AttentionCausalGqaAndMask) {
  auto be = make_cpu_backend(2);
  const int64_t S = 6, T = 2, Hq = 4, Hkv = 2, d = 5, q0 = 4;
  auto qv = randv(T * Hq * d, 31), kv = randv(S * Hkv * d, 32), vv = randv(S * Hkv * d, 33);
  Tensor q = be->upload(qv, {T, Hq, d}), k = be->upload(kv, {S, Hkv, d}), v = be->upload(vv, {S, Hkv, d});
  std::vector<float> allowed(T * S, 1.0f);
  allowed[1 * S + 2] = 0.0f;  // second query may not see key 2
  Tensor a = be->upload(allowed, {T, S});
  for (bool use_mask : {false, true}) {
    Tensor o = be->alloc({T, Hq, d});
    be->attention(o, q, k, v, q0, 0.3f, use_mask ? &a : nullptr);
    auto got = be->download(o);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        int64_t kh = h / 2;
        std::vector<double> p;
        double mx = -1e30, sum = 0;
        for (int64_t j = 0; j <= q0 + t; ++j) {
          double s = 0;
          for (int e = 0; e < d; ++e) s += qv[(t * Hq + h) * d + e] * kv[(j * Hkv + kh) * d + e];
          p.push_back(use_mask && allowed[t * S + j] == 0 ? -1e30 : s * 0.3);
          mx = std::max(mx, p.back());
        }
        for (auto& x : p) sum += (x = x < -1e29 ? 0 : std::exp(x - mx));
        for (int e = 0; e < d; ++e) {
          double o = 0;
          for (size_t j = 0; j < p.size(); ++j) o += p[j] / sum * vv[(j * Hkv + kh) * d + e];
          EXPECT_NEAR(got[(t * Hq + h) * d + e], o, 1e-5);
        }
      }
  }
}

TEST(CpuOps, ConvStreamingEqualsWhole) {
  for (int dil : {1, 3}) {
    auto be = make_cpu_backend(2);
    const int64_t T = 11, C = 5, K = 4, P = (K - 1) * dil;
    auto xv = randv(T * C, 40), wv = randv(C * K, 41);
    Weight w = be->upload_weight("conv", wv, {C, 1, K});
    Tensor x = be->upload(xv, {T, C});
    Tensor st = be->alloc({C, P});
    Tensor whole = be->alloc({T, C});
    be->causal_conv1d(whole, x, w, st, dil, Act::Silu);
    auto ref = be->download(whole);
    // naive
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < K; ++j) {
          int64_t src = t - (K - 1 - j) * dil;
          if (src >= 0) acc += wv[c * K + j] * xv[src * C + c];
        }
        EXPECT_NEAR(ref[t * C + c], acc / (1 + std::exp(-acc)), 1e-5);
      }
    // 4 tokens, then one at a time, through the carried state
    Tensor st2 = be->alloc({C, P});
    std::vector<float> pieces;
    for (int64_t t0 = 0; t0 < T;) {
      int64_t n = t0 == 0 ? 4 : 1;
      Tensor xp = x.slice(t0, n);
      Tensor op = be->alloc({n, C});
      be->causal_conv1d(op, xp, w, st2, dil, Act::Silu);
      auto v = be->download(op);
      pieces.insert(pieces.end(), v.begin(), v.end());
      t0 += n;
    }
    EXPECT_EQ(pieces, ref);
    EXPECT_EQ(be->download(st2), be->download(st));
  }
}

namespace {

struct GdnCase {
  int64_t T, Hk, Hv, dk, dv;
};

}  // namespace

TEST(CpuOps, GatedDeltaRuleChunkedEqualsRecurrent) {
  auto be = make_cpu_backend(4);
  GdnCase c{150, 2, 4, 16, 8};  // 150 tokens: three chunks, the last partial
  auto qv = randv(c.T * c.Hk * c.dk, 50), kv = randv(c.T * c.Hk * c.dk, 51),
       vv = randv(c.T * c.Hv * c.dv, 52);
  auto gv = randv(c.T * c.Hv, 53, -0.6f, -0.01f), bv = randv(c.T * c.Hv, 54, 0.05f, 0.95f);
  auto s0 = randv(c.Hv * c.dk * c.dv, 55, -0.2f, 0.2f);
  Tensor q = be->upload(qv, {c.T, c.Hk, c.dk}), k = be->upload(kv, {c.T, c.Hk, c.dk});
  Tensor v = be->upload(vv, {c.T, c.Hv, c.dv}), g = be->upload(gv, {c.T, c.Hv}),
         b = be->upload(bv, {c.T, c.Hv});
  std::vector<std::vector<float>> outs, states;
  for (bool chunked : {false, true}) {
    Tensor st = be->upload(s0, {c.Hv, c.dk, c.dv});
    Tensor o = be->alloc({c.T, c.Hv, c.dv});
    be->gated_delta_rule(o, q, k, v, g, b, st, true, chunked);
    outs.push_back(be->download(o));
    states.push_back(be->download(st));
  }
  EXPECT_GT(max_abs(outs[0]), 0.05f);
  EXPECT_LT(max_abs_diff(outs[0], outs[1]), 2e-5f * max_abs(outs[0]));
  EXPECT_LT(max_abs_diff(states[0], states[1]), 2e-5f * max_abs(states[0]));

  // A chunked prompt of 70 tokens then recurrent single steps equals the whole recurrent run.
  Tensor st = be->upload(s0, {c.Hv, c.dk, c.dv});
  std::vector<float> pieces;
  for (int64_t t0 = 0; t0 < c.T;) {
    int64_t n = t0 == 0 ? 70 : 1;
    Tensor o = be->alloc({n, c.Hv, c.dv});
    be->gated_delta_rule(o, q.slice(t0, n), k.slice(t0, n), v.slice(t0, n), g.slice(t0, n), b.slice(t0, n),
                         st, true, t0 == 0);
    auto ov = be->download(o);
    pieces.insert(pieces.end(), ov.begin(), ov.end());
    t0 += n;
  }
  EXPECT_LT(max_abs_diff(pieces, outs[0]), 2e-5f * max_abs(outs[0]));
}

TEST(CpuOps, GatedDeltaRuleFirstStepByHand) {
  // One token, zero state: S = k (β v)ᵀ, o = Sᵀ q = (k·q) β v with normalised k, q/sqrt(dk).
  auto be = make_cpu_backend(1);
  std::vector<float> qv = {3, 4}, kv = {1, 0}, vv = {2, -1};
  Tensor q = be->upload(qv, {1, 1, 2}), k = be->upload(kv, {1, 1, 2}), v = be->upload(vv, {1, 1, 2});
  Tensor g = be->upload(std::vector<float>{-0.5f}, {1, 1}), b = be->upload(std::vector<float>{0.5f}, {1, 1});
  Tensor st = be->alloc({1, 2, 2});
  Tensor o = be->alloc({1, 1, 2});
  be->gated_delta_rule(o, q, k, v, g, b, st, true, false);
  auto got = be->download(o);
  const float kq = (3.0f / 5.0f) / std::sqrt(2.0f);  // k = (1,0) normalised, q = (0.6, 0.8)/sqrt(2)
  EXPECT_NEAR(got[0], kq * 0.5f * 2.0f, 1e-5);
  EXPECT_NEAR(got[1], kq * 0.5f * -1.0f, 1e-5);
}

}  // namespace bloomery
