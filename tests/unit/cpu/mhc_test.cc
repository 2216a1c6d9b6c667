// mHC (glm5_next §4.5): Sinkhorn projection, the pre/post/comb mapping and the stream combine.
#include <cmath>

#include <gtest/gtest.h>

#include "backend/cpu/mhc.h"
#include "cpu_test_util.h"

namespace bloomery {

using test::randv;

TEST(Mhc, SinkhornRowsAndColumnsSumToOne) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    auto logits = randv(16, seed, -4.0f, 4.0f);
    std::vector<float> c(16);
    cpu::mhc_sinkhorn(logits.data(), 4, 1e-6f, 20, c.data());
    for (int i = 0; i < 4; ++i) {
      float row = 0, col = 0;
      for (int j = 0; j < 4; ++j) row += c[i * 4 + j], col += c[j * 4 + i];
      EXPECT_NEAR(col, 1.0f, 1e-5f);  // the last step normalises columns
      EXPECT_NEAR(row, 1.0f, 1e-3f);
      for (int j = 0; j < 4; ++j) EXPECT_GT(c[i * 4 + j], 0.0f);
    }
  }
}

TEST(Mhc, PreAndPostAgainstFormula) {
  auto be = make_cpu_backend(1);
  const int64_t T = 2, n = 4, D = 3, mix = (2 + n) * n;
  auto x = randv(T * n * D, 10), fn = randv(mix * n * D, 11), base = randv(mix, 12),
       scale = randv(3, 13, 0.5f, 1.5f);
  Weight wf = be->upload_weight("fn", fn, {mix, n * D}), wb = be->upload_weight("base", base, {mix}),
         ws = be->upload_weight("scale", scale, {3});
  Tensor X = be->upload(x, {T, n * D}), h = be->alloc({T, D}), post = be->alloc({T, n}),
         comb = be->alloc({T, n, n});
  MhcSpec spec;
  be->mhc_pre(h, post, comb, X, wf, wb, ws, spec);
  auto gh = be->download(h), gp = be->download(post), gc = be->download(comb);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = &x[t * n * D];
    double ss = 0;
    for (int64_t i = 0; i < n * D; ++i) ss += xt[i] * xt[i];
    const double inv = 1.0 / std::sqrt(ss / (n * D) + spec.norm_eps);
    std::vector<double> m(mix, 0.0);
    for (int64_t o = 0; o < mix; ++o)
      for (int64_t i = 0; i < n * D; ++i) m[o] += fn[o * n * D + i] * xt[i] * inv;
    for (int64_t s = 0; s < n; ++s) {
      EXPECT_NEAR(gp[t * n + s], 2.0 / (1.0 + std::exp(-(m[n + s] * scale[1] + base[n + s]))), 1e-5);
    }
    for (int64_t d = 0; d < D; ++d) {
      double want = 0;
      for (int64_t s = 0; s < n; ++s)
        want += (1.0 / (1.0 + std::exp(-(m[s] * scale[0] + base[s]))) + spec.hc_eps) * xt[s * D + d];
      EXPECT_NEAR(gh[t * D + d], want, 1e-5);
    }
    std::vector<float> logits(n * n), c(n * n);
    for (int64_t k = 0; k < n * n; ++k)
      logits[k] = static_cast<float>(m[2 * n + k] * scale[2] + base[2 * n + k]);
    cpu::mhc_sinkhorn(logits.data(), n, spec.hc_eps, spec.sinkhorn_iters, c.data());
    for (int64_t k = 0; k < n * n; ++k) EXPECT_NEAR(gc[t * n * n + k], c[k], 1e-5);
  }
  // combine: X'[s] = post[s]·y + Σ_j comb[j][s]·X[j]
  auto y = randv(T * D, 14);
  Tensor yt = be->upload(y, {T, D});
  be->mhc_post(X, yt, post, comb);
  auto gx = be->download(X);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t d = 0; d < D; ++d) {
        double want = gp[t * n + s] * y[t * D + d];
        for (int64_t j = 0; j < n; ++j) want += gc[t * n * n + j * n + s] * x[(t * n + j) * D + d];
        EXPECT_NEAR(gx[(t * n + s) * D + d], want, 1e-5);
      }
  Tensor mean = be->alloc({T, D});
  be->stream_mean(mean, X, n);
  auto gm = be->download(mean);
  for (int64_t d = 0; d < D; ++d)
    EXPECT_NEAR(gm[d], (gx[d] + gx[D + d] + gx[2 * D + d] + gx[3 * D + d]) / 4.0, 1e-6);
}

}  // namespace bloomery
