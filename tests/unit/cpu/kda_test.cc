// KDA (glm5_next §4.6): chunked prompt form vs token recurrence vs an independent double-precision reference,
// continuation from a state, and the forget gate formula.
#include <cmath>

#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace bloomery {

using test::max_abs;
using test::max_abs_diff;
using test::randv;

namespace {

// Straight from models.md §1.6 in double: S ← diag(exp g) S; u = β (v − Sᵀk); S += k uᵀ; o = Sᵀ q.
std::vector<float> kda_reference(int64_t T, int64_t H, int64_t dk, int64_t dv, const std::vector<float>& q,
                                 const std::vector<float>& k, const std::vector<float>& v,
                                 const std::vector<float>& g, const std::vector<float>& beta,
                                 std::vector<double>& S) {
  std::vector<float> out(T * H * dv);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* qt = &q[(t * H + h) * dk];
      const float* kt = &k[(t * H + h) * dk];
      double qn = 0, kn = 0;
      for (int64_t i = 0; i < dk; ++i) qn += qt[i] * qt[i], kn += kt[i] * kt[i];
      qn = std::sqrt(qn + 1e-6) * std::sqrt(static_cast<double>(dk));
      kn = std::sqrt(kn + 1e-6);
      double* Sh = &S[h * dk * dv];
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) Sh[i * dv + j] *= std::exp(g[(t * H + h) * dk + i]);
      for (int64_t j = 0; j < dv; ++j) {
        double sk = 0;
        for (int64_t i = 0; i < dk; ++i) sk += Sh[i * dv + j] * kt[i] / kn;
        const double u = beta[t * H + h] * (v[(t * H + h) * dv + j] - sk);
        for (int64_t i = 0; i < dk; ++i) Sh[i * dv + j] += kt[i] / kn * u;
      }
      for (int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < dk; ++i) o += Sh[i * dv + j] * qt[i] / qn;
        out[(t * H + h) * dv + j] = static_cast<float>(o);
      }
    }
  return out;
}

struct KdaCase {
  int64_t T, H, dk, dv;
  std::vector<float> q, k, v, g, beta;
  KdaCase(int64_t T_, int64_t H_, int64_t dk_, int64_t dv_, uint32_t seed) : T(T_), H(H_), dk(dk_), dv(dv_) {
    q = randv(T * H * dk, seed);
    k = randv(T * H * dk, seed + 1);
    v = randv(T * H * dv, seed + 2);
    g = randv(T * H * dk, seed + 3, -1.5f, -0.01f);  // per-channel log decay, as −5·σ(·) gives
    beta = randv(T * H, seed + 4, 0.05f, 0.95f);
  }
};

std::vector<float> run(Backend& be, const KdaCase& c, int64_t t0, int64_t n, Tensor& state, bool chunked) {
  auto slice = [&](const std::vector<float>& x, int64_t w) {
    return std::vector<float>(x.begin() + t0 * w, x.begin() + (t0 + n) * w);
  };
  Tensor q = be.upload(slice(c.q, c.H * c.dk), {n, c.H, c.dk}),
         k = be.upload(slice(c.k, c.H * c.dk), {n, c.H, c.dk});
  Tensor v = be.upload(slice(c.v, c.H * c.dv), {n, c.H, c.dv}),
         g = be.upload(slice(c.g, c.H * c.dk), {n, c.H, c.dk});
  Tensor b = be.upload(slice(c.beta, c.H), {n, c.H});
  Tensor o = be.alloc({n, c.H, c.dv});
  be.kda_rule(o, q, k, v, g, b, state, chunked);
  return be.download(o);
}

}  // namespace

TEST(Kda, ChunkedAndRecurrentMatchReference) {
  auto be = make_cpu_backend(2);
  KdaCase c(150, 2, 8, 6, 100);  // 150 tokens: two full chunks of 64 and a partial one
  std::vector<double> S(c.H * c.dk * c.dv, 0.0);
  auto ref = kda_reference(c.T, c.H, c.dk, c.dv, c.q, c.k, c.v, c.g, c.beta, S);
  Tensor s1 = be->alloc({c.H, c.dk, c.dv}), s2 = be->alloc({c.H, c.dk, c.dv});
  auto chunked = run(*be, c, 0, c.T, s1, true);
  auto recurrent = run(*be, c, 0, c.T, s2, false);
  const float scale = max_abs(ref);
  EXPECT_LT(max_abs_diff(chunked, ref), 2e-5f * scale);
  EXPECT_LT(max_abs_diff(recurrent, ref), 2e-5f * scale);
  std::vector<float> sref(S.begin(), S.end());
  EXPECT_LT(max_abs_diff(be->download(s1), sref), 2e-5f * max_abs(sref));
  EXPECT_LT(max_abs_diff(be->download(s2), sref), 2e-5f * max_abs(sref));
}

TEST(Kda, PromptThenStepsEqualsWholeSequence) {
  auto be = make_cpu_backend(2);
  KdaCase c(80, 3, 4, 5, 200);
  Tensor whole = be->alloc({c.H, c.dk, c.dv});
  auto full = run(*be, c, 0, c.T, whole, true);
  Tensor st = be->alloc({c.H, c.dk, c.dv});
  std::vector<float> pieces = run(*be, c, 0, 70, st, true);  // a chunked prompt, then a chunked continuation
  auto tail = run(*be, c, 70, 5, st, true);
  pieces.insert(pieces.end(), tail.begin(), tail.end());
  for (int64_t t = 75; t < c.T; ++t) {  // then single decode steps
    auto one = run(*be, c, t, 1, st, false);
    pieces.insert(pieces.end(), one.begin(), one.end());
  }
  EXPECT_LT(max_abs_diff(pieces, full), 1e-5f * max_abs(full));
}

TEST(Kda, ForgetGateLowerBoundAndSoftplus) {
  auto be = make_cpu_backend(1);
  const int64_t T = 2, H = 2, dk = 3;
  auto f = randv(T * H * dk, 7, -30.0f, 30.0f), bias = randv(H * dk, 8), alog = randv(H, 9);
  Weight wb = be->upload_weight("dt_bias", bias, {H * dk}),
         wa = be->upload_weight("A_log", alog, {1, 1, H, 1});
  Tensor ft = be->upload(f, {T, H * dk});
  for (bool lower : {true, false}) {
    Tensor g = be->alloc({T, H, dk});
    be->kda_gate(g, ft, wb, wa, lower, -5.0f);
    auto got = be->download(g);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < dk; ++d) {
          const double x = f[(t * H + h) * dk + d] + bias[h * dk + d], a = std::exp(alog[h]);
          const double want = lower ? -5.0 / (1.0 + std::exp(-a * x)) : -a * std::log1p(std::exp(x));
          EXPECT_NEAR(got[(t * H + h) * dk + d], want, 1e-4 * std::max(1.0, std::fabs(want)));
          if (lower) EXPECT_TRUE(got[(t * H + h) * dk + d] >= -5.0f && got[(t * H + h) * dk + d] <= 0.0f);
        }
  }
}

}  // namespace bloomery
